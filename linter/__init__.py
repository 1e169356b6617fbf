"""cachewarden's file linter: readers, rule engine, reporters, fixes."""
