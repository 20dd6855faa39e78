"""The verify headline keeps the signs of the end-to-end errors (+ where the simulator is slower);
the --fail-above gate compares their absolute values."""
from experiments.verification.verify import (e2e_fidelity, headline_errors, headline_text, over_limit,
                                             signed_headline)


def test_signed_headline_and_its_gate():
    e2e = e2e_fidelity({"ttft_s_p50": 1.24, "tpot_s_p50": 0.0485, "e2e_s_p50": 10.0},
                       {"ttft_s_p50": 1.0, "tpot_s_p50": 0.05, "e2e_s_p50": 10.0})
    signed = signed_headline(None, e2e)
    assert list(signed) == ["ttft_s_p50", "tpot_s_p50", "e2e_s_p50"]
    assert round(signed["ttft_s_p50"], 6) == 24.0 and round(signed["tpot_s_p50"], 6) == -3.0
    assert headline_text(signed) == "ttft_s_p50 +24.0 %, tpot_s_p50 -3.0 %, e2e_s_p50 +0.0 %"
    assert headline_errors(None, e2e) == {k: abs(v) for k, v in signed.items()}
    assert set(over_limit(headline_errors(None, e2e), 2.5)) == {"ttft_s_p50", "tpot_s_p50"}  # -3 % fails a 2.5 % gate
