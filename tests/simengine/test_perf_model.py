"""The performance model against every published figure (field-facts.md), within 10%."""

from __future__ import annotations

import pytest

from repro_py.simengine import perf_model as pm
from repro_py.simengine.perf_model import CALIBRATION, ModelConfig, PublishedFigure


@pytest.mark.parametrize("fig", CALIBRATION, ids=[f.name for f in CALIBRATION])
def test_calibration_table_within_10_percent(fig: PublishedFigure) -> None:
    value = pm.modelled(fig)
    assert abs(value - fig.published) / fig.published <= 0.10, (fig.name, fig.published, value)


def test_table_covers_each_published_figure() -> None:
    names = {f.name for f in CALIBRATION}
    for required in (
        "baseline C=1",
        "b8 t4 C=1",
        "b48 t8 C=1",
        "b4 t4 C=32",
        "b8 t4 C=32",
        "b12 t6 w2048 accept",
        "bs16 b16 t4 accept",
        "B300 b8 C=1",
        "mask-offset b16 t4 C=1",
    ):
        assert required in names
    rows = pm.calibration_table()
    assert len(rows) == len(CALIBRATION)
    assert all(abs(float(str(r["error_pct"]))) <= 10.0 for r in rows)


def tree(b: int, t: int, **kw: object) -> ModelConfig:
    return ModelConfig(mode="ddtree", budget=b, topk=t, block_size=int(str(kw.pop("block", 8))), window=2048, **kw)  # type: ignore[arg-type]


def test_budget_tradeoffs_have_the_published_shape() -> None:
    c1 = [pm.predict(tree(b, 4 if b < 24 else 8), 1).per_request_tps for b in (8, 16, 32, 48)]
    assert c1 == sorted(c1, reverse=True)  # C=1 throughput falls with budget
    assert pm.predict(tree(4, 4), 32).aggregate_tps > pm.predict(tree(8, 4), 32).aggregate_tps  # small wins at C=32
    # speculative beats the autoregressive baseline at C=1
    assert pm.predict(tree(8, 4), 1).per_request_tps > 2 * pm.predict(ModelConfig(mode="none"), 1).per_request_tps


def test_block16_on_an_8_trained_drafter_gains_only_a_little() -> None:
    a8 = pm.accept_length(tree(16, 4))
    a16 = pm.accept_length(tree(16, 4, block=16))
    assert 0.15 <= a16 - a8 <= 0.45
    trained16 = ModelConfig(mode="ddtree", budget=16, topk=4, block_size=16, window=2048, drafter_block_size=16)
    assert pm.accept_length(trained16) > a16 + 0.5  # a drafter trained at 16 would do much better


def test_acceptance_bounds_and_context() -> None:
    assert pm.accept_length(ModelConfig(mode="none")) == 1.0
    assert pm.accept_length(tree(1, 1)) <= 2.0
    for b in (1, 2, 4, 8, 64, 256):
        a = pm.accept_length(tree(b, min(4, b)))
        assert 1.0 <= a <= min(b, 7) + 1
    # a full draft cache beyond the trained window is out of distribution
    full = ModelConfig(mode="ddtree", budget=8, topk=4, window=None)
    assert pm.accept_length(full, 8192) < pm.accept_length(tree(8, 4), 8192)
    # long context costs time and favours bigger budgets relatively
    assert pm.step_ms(tree(8, 4), 8, 8192) > pm.step_ms(tree(8, 4), 8, 60)
    ratio_short = pm.predict(tree(16, 4), 1, 60).per_request_tps / pm.predict(tree(4, 4), 1, 60).per_request_tps
    ratio_long = pm.predict(tree(16, 4), 1, 8192).per_request_tps / pm.predict(tree(4, 4), 1, 8192).per_request_tps
    assert ratio_long > ratio_short


def test_dflash_chain_mode() -> None:
    chain = ModelConfig(mode="dflash", block_size=8, window=2048)
    assert 1.0 < pm.accept_length(chain) < pm.accept_length(tree(8, 4))
    assert chain.verify_width == 8
