"""Classify one model answer to a coding problem.

Classes (exactly one per answer):

``pass``          the final block ran and every hidden test passed
``wrong_answer``  a hidden test's assert failed
``exception``     the code raised (or failed to load, or ran out of memory)
``timeout``       the code exceeded the wall-clock or CPU limit
``truncated``     ``finish_reason == "length"`` and the final answer holds no
                  complete code block: the token limit cut the answer off
``no_code``       the model stopped on its own and gave no complete final block

Truncation is a finding from ``finish_reason`` and the text, never a guess: an
answer cut by the limit that still has a complete final block is run and
classified by its result (with the finish reason kept in the detail).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from repro_py.codeeval.extract import Extraction, extract_final_code
from repro_py.codeeval.problems import Problem
from repro_py.codeeval.sandbox import SandboxLimits, SandboxResult, run_candidate

Verdict = Literal["pass", "wrong_answer", "exception", "timeout", "truncated", "no_code"]
VERDICTS: tuple[Verdict, ...] = ("pass", "wrong_answer", "exception", "timeout", "truncated", "no_code")


@dataclasses.dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    detail: str
    finish_reason: str | None
    extraction: Extraction
    sandbox: SandboxResult | None

    def as_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "detail": self.detail,
            "finish_reason": self.finish_reason,
            "code_source": self.extraction.source,
            "code_found": self.extraction.code is not None,
            "reasoning_blocks_ignored": self.extraction.reasoning_blocks,
            "sandbox": None if self.sandbox is None else {
                "outcome": self.sandbox.outcome,
                "detail": self.sandbox.detail,
                "duration_s": round(self.sandbox.duration_s, 4),
                "isolation": self.sandbox.isolation,
            },
        }


def classify_without_code(extraction: Extraction, finish_reason: str | None) -> tuple[Verdict, str]:
    """Verdict for an answer that has no complete final code block."""
    why = extraction.reason or "no code"
    if finish_reason == "length":
        return "truncated", f"finish_reason=length and {why}"
    return "no_code", f"finish_reason={finish_reason} and {why}"


def classify_run(result: SandboxResult, finish_reason: str | None) -> tuple[Verdict, str]:
    note = " (finish_reason=length; the final block was complete)" if finish_reason == "length" else ""
    if result.outcome == "passed":
        return "pass", result.detail + note
    if result.outcome == "assertion_failed":
        return "wrong_answer", result.detail + note
    if result.outcome == "timeout":
        return "timeout", result.detail + note
    return "exception", result.detail + note


def judge(
    problem: Problem,
    *,
    content: str | None,
    reasoning: str | None,
    finish_reason: str | None,
    limits: SandboxLimits | None = None,
    isolation: str | None = None,
) -> Judgement:
    """Extract the final code, run it against the problem's hidden tests (which see its entry point and
    nothing else it defined), classify. ``isolation``: the sandbox mode (default: the strongest here)."""
    extraction = extract_final_code(content, reasoning)
    if extraction.code is None:
        verdict, detail = classify_without_code(extraction, finish_reason)
        return Judgement(verdict, detail, finish_reason, extraction, None)
    result = run_candidate(extraction.code, problem.tests, limits=limits, isolation=isolation,
                           entry_points=(problem.entry_point,))
    verdict, detail = classify_run(result, finish_reason)
    return Judgement(verdict, detail, finish_reason, extraction, result)
