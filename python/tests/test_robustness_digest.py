"""tools/robustness-digest: how it groups claims by their robustness (docs/robustness.md)."""

import importlib.machinery
import importlib.util
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def digest():
    path = os.path.join(ROOT, "tools", "robustness-digest")
    loader = importlib.machinery.SourceFileLoader("robustness_digest", path)
    spec = importlib.util.spec_from_loader("robustness_digest", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def claim(verdict, frac, flipped=()):
    r = {"pass_fraction": frac, "points": 40, "ends": [],
         "flipped_by": [{"parameter": p, "value": v, "verdict": "X", "measured": 0} for p, v in flipped]}
    return {"claim": "c", "source": "s", "claim_verdict": verdict, "verdict": verdict,
            "claim_robustness": r}


def test_a_pass_that_holds_everywhere_is_robust_and_one_a_range_end_flips_is_not():
    d = digest()
    assert d.group("PASS", claim("PASS", 1.0)["claim_robustness"]) == "robust"
    assert d.group("PASS", claim("PASS", 1.0, [("clients", "1")])["claim_robustness"]) == "leaning"


def test_a_fail_is_judged_by_the_share_where_it_still_fails():
    d = digest()
    assert d.group("FAIL", claim("FAIL", 0.0)["claim_robustness"]) == "robust"
    # Fails at the defaults but passes at 80 % of the points: the defaults are the minority.
    assert d.group("FAIL", claim("FAIL", 0.8)["claim_robustness"]) == "fragile"
    assert d.group("PASS", claim("PASS", 0.3)["claim_robustness"]) == "fragile"


def test_a_file_without_robustness_is_refused(tmp_path, capsys):
    d = digest()
    plain = tmp_path / "results.json"
    plain.write_text(json.dumps({"micro": {"claims": [{"claim": "c", "verdict": "PASS"}]}}))
    assert d.main(["x", str(plain)]) == 1
    full = tmp_path / "robust.json"
    full.write_text(json.dumps({"micro": {"claims": [claim("PASS", 0.3)]}}))
    assert d.main(["x", str(full)]) == 0
    assert "| fragile | 1 | 1 | 0 |" in capsys.readouterr().out
