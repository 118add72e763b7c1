"""The library's answers: for each graded question, the functions that would answer it.

``LIBRARY_ANSWERS[chapter][question]`` maps a function the student is asked to write to a list:

- first, how the library answers it: a drop-in name (called with the student's arguments, plus
  any keyword arguments written after it, as in ``f(return_weights=True)``; it is blocked too),
  a ``lambda`` that adapts the library to the question's arguments, or ``None`` where there is
  no such answer;
- then the other library functions that must not be called while the question's calls run. In
  the student's process they all raise (``tools.grading.worker.blocked``), so calling them scores zero.
  ``NO_AUTOGRAD`` there is not a function: it refuses autograd as a whole
  (``tools.grading.worker.autograd_refused``).

The tests build a "calls the library" submission from every first entry and check both halves:
zero with the library blocked, full marks with it let through (so the entry really answers it).
"""

from __future__ import annotations

from tools.grading.worker import NO_AUTOGRAD

SDPA = "torch.nn.functional.scaled_dot_product_attention"
MHA_FORWARD = ("lambda x, w_in, w_out, h: torch.nn.functional.multi_head_attention_forward(*[x.transpose(0, 1)] * 3, "
               "x.shape[-1], h, w_in, None, None, None, False, 0.0, w_out, None, need_weights=False)[0].transpose(0, 1)")
CROSS_ENTROPY = "torch.nn.functional.cross_entropy"
ATTENTION = ["xfl.attention.scaled_dot_product_attention", "xfl.attention.attention_weights", SDPA,
             "torch.nn.functional.multi_head_attention_forward", "torch.nn.MultiheadAttention.forward",
             "xfl.attention.MultiHeadAttention.forward"]

LIBRARY_ANSWERS: dict[str, dict[str, dict[str, list[str]]]] = {
    "ch00_data": {
        # q3 streams (a state of at most 16 numbers): the library's whole-tensor statistics cannot answer it
        "q3": {"stats_update": [None, "xfl.data.cifar.channel_stats"],
               "stats_finish": [None, "xfl.data.cifar.channel_stats"]},
    },
    "ch01_qkv": {
        "q1": {"attention": ["xfl.attention.scaled_dot_product_attention(return_weights=True)",
                             "xfl.attention.attention_weights", SDPA]},
    },
    "ch02_multihead": {
        "q1": {"split_heads": ["lambda x, h: xfl.attention.MultiHeadAttention(x.shape[-1], h).split_heads(x)",
                               "xfl.attention.MultiHeadAttention.split_heads",
                               "xfl.attention.MultiHeadAttention.__init__"]},
        "q2": {"merge_heads": ["xfl.attention.MultiHeadAttention.merge_heads"]},
        "q3": {"multihead_self_attention": [MHA_FORWARD, *ATTENTION]},
        "q4": {"uneven_heads_attention": [None, *ATTENTION]},
        "q5": {"mha_parameter_count": [
            "lambda M, h, bias=True: sum(p.numel() for p in torch.nn.MultiheadAttention(M, h, bias=bias).parameters())",
            "torch.nn.MultiheadAttention.__init__", "xfl.attention.MultiHeadAttention.__init__",
            "xfl.model.count_parameters"]},
    },
    "ch03_masking": {
        "q1": {"causal_mask": ["xfl.attention.causal_mask"]},
        "q2": {"padding_mask": ["xfl.attention.padding_mask"]},
        "q3": {"masked_attention_weights": ["xfl.attention.attention_weights", SDPA,
                                            "xfl.attention.scaled_dot_product_attention"]},
    },
    "ch04_position": {
        "q1": {"frequencies": ["xfl.position.frequencies"]},
        "q2": {"sinusoidal_encoding": ["xfl.position.sinusoidal_encoding"]},
        "q3": {"shift_matrix": ["xfl.position.offset_rotation"]},
    },
    "ch05_encoder_decoder": {
        "q1": {"layer_norm": ["lambda x, gamma, beta, eps=1e-5: torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps)",
                              "torch.nn.functional.layer_norm", "torch.layer_norm",
                              "torch.nn.LayerNorm.forward"]},
        "q4": {"label_smoothed_loss": [
            "lambda logits, targets, smoothing, pad_id=0: torch.nn.functional.cross_entropy(logits.flatten(0, -2), "
            "targets.flatten(), ignore_index=pad_id, label_smoothing=smoothing)",
            CROSS_ENTROPY, "torch.nn.CrossEntropyLoss.forward"]},
        # q5 asks for a gradient without autograd: NO_AUTOGRAD refuses any tensor that requires
        # grad, any *_backward op (y.grad_fn(...), torch.ops.aten.native_layer_norm_backward) and
        # forward-mode duals (torch.func.jacfwd makes them with make_dual)
        "q5": {"layer_norm_backward": [None, "torch.autograd.grad", "torch.autograd.backward",
                                       "torch.Tensor.backward", "torch.autograd.forward_ad.make_dual",
                                       NO_AUTOGRAD]},
    },
    "ch06_bleu": {  # the exercises' intro puts NLTK's BLEU off limits in q1 to q3 as well
        "q1": {"ngram_counts": ["xfl.bleu.ngram_counts", "nltk.util.ngrams", "nltk.util.everygrams"]},
        "q2": {"clipped_precision": ["xfl.bleu.modified_precision", "xfl.bleu.clipped_matches",
                                     "xfl.bleu.corpus_statistics",
                                     "nltk.translate.bleu_score.modified_precision"]},
        "q3": {"brevity_penalty": ["xfl.bleu.brevity_penalty",
                                   "nltk.translate.bleu_score.brevity_penalty"]},
        # q5: every xfl.bleu function that computes part of BLEU (the text allows other code)
        "q5": {"repeated_word_bleu": [None, "xfl.bleu.sentence_bleu", "xfl.bleu.corpus_bleu",
                                      "xfl.bleu.modified_precision", "xfl.bleu.brevity_penalty",
                                      "xfl.bleu.clipped_matches", "xfl.bleu.closest_ref_length",
                                      "xfl.bleu.corpus_statistics", "xfl.bleu.bleu_from_statistics",
                                      "xfl.bleu.ngram_counts"]},
    },
    "ch06_decoding": {
        # q1: the private helper behind greedy_decode and beam_search strips a row exactly so (the
        # lambda shows it answers; the name after it is what is blocked)
        "q1": {"hypothesis_ids": ["lambda row, eos, pad: xfl.decode._strip(row[1:], eos, pad)",
                                  "xfl.decode._strip"]},
        # q3's sliding-window cache step: no library function answers it; attention is blocked
        "q3": {"window_cache_attention": [None, *ATTENTION, "xfl.attention.newest_queries_mask"]},
    },
    "ch07_vit": {
        "q1": {"patchify": ["xfl.vit.patchify"]},
        "q2": {"unpatchify": ["xfl.vit.unpatchify"]},
    },
    "ch08_pixel": {
        "q3": {"pixel_self_attention": [
            "lambda x, h: torch.nn.functional.scaled_dot_product_attention(*[x.reshape(x.shape[0], h, x.shape[1] // h, -1)"
            ".transpose(-2, -1)] * 3).transpose(-2, -1).reshape(x.shape)", *ATTENTION]},
        "q4": {"pixel_attention_map": [None, *ATTENTION]},
    },
    "ch09_gpt": {
        "q2": {"lm_loss_from_logits": [
            "lambda logits, targets, pad_id=0: torch.nn.functional.cross_entropy(logits.flatten(0, -2), targets.flatten(), "
            "ignore_index=pad_id)", CROSS_ENTROPY, "torch.nn.CrossEntropyLoss.forward"]},
        "q5": {"causal_padding_mask": ["xfl.attention.causal_padding_mask"]},
    },
    "ch10_modern": {
        "q1": {"rms_norm": ["lambda x, weight, eps=1e-6: torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)",
                            "torch.nn.functional.rms_norm", "torch.nn.RMSNorm.forward", "xfl.norms.RMSNorm.forward"]},
        "q2": {"rope": ["xfl.position.apply_rope", "xfl.position.rope_angles"]},
        "q3": {"swiglu": ["lambda x, w, v, w2: xfl.blocks.GatedFeedForward.from_weights(w, v, w2)(x)",
                          "xfl.blocks.GatedFeedForward.forward", "xfl.blocks.GatedFeedForward.from_weights"]},
        "q4": {"repeat_kv": ["xfl.attention.repeat_kv_heads"]},
        "q5": {"gqa_step": [None, "xfl.attention.repeat_kv_heads", *ATTENTION]},
    },
    "ch11_attention_at_scale": {
        "q1": {"merge": ["xfl.tiled_attention.merge_partials", "xfl.tiled_attention.rescale"]},
        "q2": {"tiled_attention": [
            "lambda q, k, v, block: xfl.tiled_attention.tiled_attention(q, k, v, block_q=block, block_k=block)",
            "xfl.tiled_attention.tiled_attention", "xfl.tiled_attention.tiled_attention_forward",
            "xfl.tiled_attention.merge_partials", "xfl.tiled_attention.block_partial", *ATTENTION]},
        "q3": {"causal_tiles": ["xfl.tiled_attention.causal_block_counts"]},
        "q4": {"explicit_peak_bytes": [None, "xfl.tiled_attention.explicit_attention_bytes"],
               "longest_sequence": [None, "xfl.tiled_attention.explicit_attention_bytes"]},
        "q5": {"alibi_backward": [None, "torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward",
                                  "xfl.tiled_attention.tiled_attention_backward"]},
        "q6": {"dropout_attention_forward": [None, "torch.autograd.grad", "torch.autograd.backward",
                                             "torch.Tensor.backward"],
               "dropout_attention_backward": [None, "torch.autograd.grad", "torch.autograd.backward",
                                              "torch.Tensor.backward",
                                              "xfl.tiled_attention.tiled_attention_backward"]},
        "q7": {"dropout_attention_grads": [None, "xfl.tiled_attention.tiled_attention_recomputing"]},
        "q8": {"decode_partials": [  # split-key decoding: no library function returns its partials
            None, "xfl.triton_attention.triton_attention_forward", "xfl.triton_attention.triton_attention",
            "xfl.tiled_attention.tiled_attention_forward", "xfl.tiled_attention.tiled_attention",
            "xfl.tiled_attention.merge_partials", "xfl.tiled_attention.block_partial",
            # not SDPA: blocking a builtin turns on a profiler, which slows Triton's interpreter
            # about 4x (measured), and SDPA returns no log-sum-exp
            *(name for name in ATTENTION if name != SDPA)]},
    },
    "ch04b_subwords": {  # questions 2 to 4 ask for more than xfl.bpe returns
        "q1": {"count_pairs": [
            "lambda corpus: dict(sum((collections.Counter({p: c * n for p, c in xfl.bpe.pairs_of(s).items()}) "
            "for s, n in corpus.items()), collections.Counter()))", "xfl.bpe.pairs_of"]},
        "q2": {"merge_pair": [None, "xfl.bpe.merge_symbols"]},
        "q3": {"apply_merges": [None, "xfl.bpe.BPE.encode_word", "xfl.bpe.merge_symbols"]},
        "q4": {"learn_merges": [None, "xfl.bpe.train_bpe"]},
        "q6": {"first_difference": [None, "xfl.bpe.train_bpe"]},
    },
}


def blocked_names(chapter: str | None) -> dict[str, list[str]]:
    """``{question: [library functions that raise while its calls run]}`` for one chapter."""
    return {q: sorted({name.partition("(")[0] for names in answers.values() for name in names
                       if name and not name.startswith("lambda")})
            for q, answers in LIBRARY_ANSWERS.get(chapter or "", {}).items()}
