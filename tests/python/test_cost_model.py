"""bench/cost_model.py on a small case: the designs' costs keep the relations the model rests on
(no design does less than the useful work, multicast pairs read no more than single CTAs, the
token-granular designs waste almost nothing, a tile's union is at least its tokens' blocks),
and every floor is positive and no faster than the useful work at the dense rate."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from bench import cost_model  # noqa: E402


def test_costs_of_a_small_random_case():
    costs = cost_model.case_costs(600, 4096, "random")
    useful = costs["union8"]["useful"]
    assert useful > 0, "no useful work counted"
    for name, c in costs.items():
        assert c["useful"] == useful, f"[{name}] useful work differs between designs"
        assert c["executed"] >= useful, f"[{name}] executes less than the useful work"
        seconds = cost_model.floor_seconds(c)
        assert seconds >= useful / cost_model.DENSE_FLOPS, f"[{name}] floor beats the dense rate"
        assert cost_model.floor_seconds(c, split=True) <= seconds, f"[{name}] split made it slower"
    assert costs["union8x2"]["l2_bytes"] <= costs["union8"]["l2_bytes"], "multicast read more"
    assert costs["union8x2"]["executed"] == costs["union8"]["executed"], "multicast changed work"
    assert costs["keys1"]["executed"] < 1.1 * useful, "one token a CTA should waste ~nothing"
    assert costs["warp16"]["executed"] == costs["keys1"]["executed"], "per-token work differs"
    assert costs["warp16"]["l2_bytes"] <= costs["union8"]["l2_bytes"], "16 tokens read more than 8"
    assert costs["union8"]["executed"] > 1.2 * useful, "random selections waste union work"
