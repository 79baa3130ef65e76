from __future__ import annotations

from repro_py.codeeval.problems import Problem, load_problems
from repro_py.codeeval.runner import judge
from repro_py.codeeval.sandbox import SandboxLimits

FAST = SandboxLimits(timeout_s=5.0, cpu_s=2, memory_mb=256)
PROBLEM = Problem(
    id="add", prompt="def add(a, b):\n", entry_point="add",
    reference="def add(a, b):\n    return a + b\n", wrong_draft="def add(a, b):\n    return a - b\n",
    tests="assert add(2, 3) == 5\nassert add(-1, 1) == 0\n",
)


def fenced(code: str) -> str:
    return "```python\n" + code + "```\n"


def test_pass_from_final_answer_not_draft() -> None:
    text = "<think>" + fenced(PROBLEM.wrong_draft) + "</think>" + fenced(PROBLEM.reference)
    j = judge(PROBLEM, content=text, reasoning=None, finish_reason="stop", limits=FAST)
    assert j.verdict == "pass", j.detail


def test_wrong_answer() -> None:
    j = judge(PROBLEM, content=fenced(PROBLEM.wrong_draft), reasoning=None, finish_reason="stop", limits=FAST)
    assert j.verdict == "wrong_answer"


def test_exception() -> None:
    j = judge(PROBLEM, content=fenced("def add(a, b):\n    raise ValueError('no')\n"), reasoning=None,
              finish_reason="stop", limits=FAST)
    assert j.verdict == "exception"
    assert "ValueError" in j.detail


def test_timeout() -> None:
    j = judge(PROBLEM, content=fenced("def add(a, b):\n    while True:\n        pass\n"), reasoning=None,
              finish_reason="stop", limits=SandboxLimits(timeout_s=3.0, cpu_s=1))
    assert j.verdict == "timeout"


def test_truncated_inside_reasoning() -> None:
    text = "<think>Let me think. " + fenced(PROBLEM.wrong_draft) + "and so"
    j = judge(PROBLEM, content=text, reasoning=None, finish_reason="length", limits=FAST)
    assert j.verdict == "truncated"
    assert j.sandbox is None


def test_truncated_inside_final_block() -> None:
    text = "<think>ok</think>```python\ndef add(a, b):\n    return a"
    j = judge(PROBLEM, content=text, reasoning=None, finish_reason="length", limits=FAST)
    assert j.verdict == "truncated"
    assert "never closed" in j.detail


def test_no_code_when_model_stopped() -> None:
    j = judge(PROBLEM, content="<think>hmm</think>I do not know.", reasoning=None, finish_reason="stop", limits=FAST)
    assert j.verdict == "no_code"


def test_length_with_complete_final_block_is_run_not_guessed() -> None:
    text = "</think>" + fenced(PROBLEM.reference) + "Some trailing explanation that got cu"
    j = judge(PROBLEM, content=text, reasoning=None, finish_reason="length", limits=FAST)
    assert j.verdict == "pass"
    assert "finish_reason=length" in j.detail


def test_project_problems_load_and_references_pass() -> None:
    problems = load_problems()
    assert len(problems) >= 10
    for p in problems:
        ok = judge(p, content=fenced(p.reference), reasoning=None, finish_reason="stop", limits=FAST)
        assert ok.verdict == "pass", (p.id, ok.detail)
        bad = judge(p, content=fenced(p.wrong_draft), reasoning=None, finish_reason="stop", limits=FAST)
        assert bad.verdict != "pass", p.id
