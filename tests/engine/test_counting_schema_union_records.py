"""The nullable-union rule (rendering.response_format_correction) applied by the counter, checked on
the training records it was found on (../shared/data/recorded; skipped where absent)."""

from __future__ import annotations

import pytest
from recorded_counts import DATA, assert_count_exact

RECORDED = {
    # LLMGuardrailResult: feedback is str | None (one union), gpt-4.1-mini and gpt-4o
    "one-union-gpt-4.1-mini": "crewAIInc/crewAI:lib/crewai/tests/cassettes/"
    "test_after_kickoff_modification.yaml#3",
    "one-union-gpt-4o": "crewAIInc/crewAI:lib/crewai/tests/cassettes/"
    "test_task_guardrail_process_output.yaml#0",
    # StepObservation: suggested_refinements and replan_reason nullable (two unions), gpt-4o-mini
    "two-unions-gpt-4o-mini": "crewAIInc/crewAI:lib/crewai/tests/cassettes/agents/"
    "TestAgentExecutorPlanning.test_agent_kickoff_with_planning_stores_plan_in_state.yaml#2",
}


@pytest.mark.skipif(not DATA.exists(), reason="recorded data not present")
@pytest.mark.parametrize("case", sorted(RECORDED))
def test_recorded(case: str) -> None:
    assert_count_exact(RECORDED, case)
