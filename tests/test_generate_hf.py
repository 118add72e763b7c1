"""xfl's GPT-2 bridge and greedy generation against Hugging Face's (``bench/generate_hf.py``).

The bridge's refusals and the benchmark's line when ``transformers`` is absent are checked always;
the comparison itself (``--smoke``: a tiny model, a few seconds) needs ``transformers``, a
development dependency. Greedy decoding's own equalities (cached = uncached = the argmax of the
full model) are in tests/test_kv_cache.py and run without it.
"""

import json
import sys

import pytest
import torch

from helpers import import_bench
from xfl.decode import sample
from xfl.hf_bridge import check_gpt2
from xfl.model import GPT, GPTConfig


def test_the_gpt2_bridge_refuses_another_block():
    bench = import_bench("generate_hf")
    check_gpt2(bench.gpt2_like(bench.SMOKE["model"]))  # GPT-2's own block passes
    modern = GPT(GPTConfig.modern(vocab_size=16, d_model=16, num_heads=2, num_layers=1, max_len=8))
    with pytest.raises(ValueError, match="to_gpt2 needs norm='layer', got norm='rms'"):
        check_gpt2(modern)
    relu = GPT(GPTConfig(vocab_size=16, d_model=16, num_heads=2, num_layers=1, max_len=8, positions="learned"))
    with pytest.raises(ValueError, match=r"to_gpt2 needs activation=one of \('gelu_tanh', 'gelu'\), "
                                         r"got activation='relu'"):
        check_gpt2(relu)


def test_chapter_9s_block_gives_hugging_faces_logits_and_greedy_tokens():
    """Exact GELU and √d-scaled embeddings tied to the head (chapter 9's model): the scale goes into
    GPT-2's table and its head is untied. float64: logits to 1e-10, the same greedy tokens."""
    pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) is not installed")
    from xfl.hf_bridge import to_gpt2
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, d_model=32, num_heads=4, num_layers=2, max_len=24, dropout=0.0,
                          activation="gelu", positions="learned")).double().eval()
    hf = to_gpt2(model)
    assert not hf.config.tie_word_embeddings and hf.config.activation_function == "gelu"
    prompt = torch.randint(1, 40, (3, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(hf(prompt).logits, model(prompt), rtol=0, atol=1e-10)
    theirs = import_bench("generate_hf").hf_generate(hf, prompt, 15)
    assert torch.equal(sample(model, prompt, 15, top_k=1), theirs)


def test_without_transformers_the_benchmark_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    out = tmp_path / "generate_hf.json"
    result = import_bench("decode").main(["--hf", "--smoke", "--out", str(out)])  # handed over
    assert result == {"skipped": import_bench("generate_hf").SKIP_LINE} and not out.exists()
    assert "transformers is not installed: skipping" in capsys.readouterr().out


def test_smoke_run_generates_hugging_faces_tokens(tmp_path):
    pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) is not installed")
    out = tmp_path / "generate_hf.json"
    report = import_bench("generate_hf").main(["--smoke", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(report)) and saved["smoke"] is True
    assert saved["max_logit_difference"] < 1e-4 and saved["identical_tokens"] is True
    assert set(saved["batches"]) == {"1", "3"}
    for run in saved["batches"].values():
        assert run["identical_tokens"] and run["identical_to_uncached"] and run["new_tokens"] == 12
        assert run["xfl_seconds"] > 0 and run["hf_seconds"] > 0 and run["ratio_xfl_over_hf"] > 0
        assert run["pairs"] == 3 and len(run["xfl_times"]) == 3 and run["clock"] == "thread CPU"
        low, high = run["ratio_interquartile"]
        assert low <= run["ratio_xfl_over_hf"] <= high
