"""xfl.translation on made-up sentence pairs (no download): task, batches, BLEU plumbing."""

import pytest
import torch

from xfl.data.text import EOS, PAD, SOS, UNK, clean, detokenize, normalize_text, split_by_english, tokenize
from xfl.decode import greedy_decode, sequence_log_prob
from xfl.model import Seq2SeqTransformer
from xfl.checkpoint import LastWeights
from xfl.translation import (bleu_by_length, bleu_conditions, choose_decoding, choose_weights, describe_conditions,
                             heldout_bleu, prepare_task, translate)

WORDS = ["cat", "dog", "red", "big", "sees", "the", "a", "runs"]
SPANISH = {"cat": "gato", "dog": "perro", "red": "rojo", "big": "grande", "sees": "ve",
           "the": "el", "a": "un", "runs": "corre"}


def made_up_pairs(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        words = [WORDS[i] for i in torch.randint(0, len(WORDS), (int(torch.randint(2, 6, (1,), generator=g)),),
                                                 generator=g)]
        pairs.append((" ".join(words) + ".", " ".join(SPANISH[w] for w in words) + "."))
    pairs.append((pairs[0][0], "otra traducción."))  # a second reference for one sentence
    return pairs


def test_task_splits_by_english_and_keeps_all_references():
    pairs = made_up_pairs()
    held_out = split_by_english(pairs, test_fraction=0.2, seed=0).test[0][0]
    long_reference = "una traducción mucho más larga que el límite de ocho palabras."
    pairs += [(held_out, "otra traducción."), (held_out, long_reference)]  # the split is unchanged
    task = prepare_task(pairs, max_len=8, test_fraction=0.2, min_freq=1, seed=0)
    train_english = {tuple(s) for s, _ in task.train}
    test_english = {tuple(task.src_vocab.encode_text(en)) for en, _ in task.test}
    assert not train_english & test_english  # nothing held out was trained on
    references = {normalize_text(en): refs for en, refs in task.test}
    assert {"otra traducción.", long_reference} <= set(references[normalize_text(held_out)])
    for en, refs in task.test:  # every translation of a test sentence is a reference
        assert sorted(refs) == sorted(es for e, es in pairs if normalize_text(e) == normalize_text(en))
    assert max(len(s) for s, _ in task.train) <= 8 + 2  # training pairs fit, with SOS/EOS


def test_translate_and_bleu_run_on_an_untrained_model():
    task = prepare_task(made_up_pairs(), test_fraction=0.2, min_freq=1)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(task.model_config(d_model=16, num_heads=2, num_encoder_layers=1,
                                                 num_decoder_layers=1, dropout=0.0)).eval()
    out = translate(model, task, ["the cat sees a dog.", ""], beam_size=2)
    assert len(out) == 2 and all(isinstance(t.text, str) for t in out)
    score = heldout_bleu(model, task, beam_size=1, limit=10)
    assert 0.0 <= score["bleu"] <= 100.0 and score["sentences"] == min(10, len(task.test))


def test_translations_carry_the_models_log_probability_and_the_penalty_reranks():
    task = prepare_task(made_up_pairs(), test_fraction=0.2, min_freq=1)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(task.model_config(d_model=16, num_heads=2, num_encoder_layers=1,
                                                 num_decoder_layers=1, dropout=0.0)).eval()
    english = ["the cat sees a dog.", "a big dog runs."]
    for beam_size in (1, 3):
        for en, t in zip(english, translate(model, task, english, beam_size=beam_size)):
            src = torch.tensor([task.src_vocab.encode(tokenize(en))])
            ends = (EOS, None) if t.ids else (EOS,)  # EOS produced, or max_len reached
            assert any(t.log_prob == pytest.approx(sequence_log_prob(model, src, t.ids, SOS, eos), abs=1e-4)
                       for eos in ends)
            assert t.text == detokenize(task.tgt_vocab.decode(t.ids))
    plain = translate(model, task, english, beam_size=3)
    for penalty in (0.5, 1.0, 2.0):
        rank = lambda t: t.log_prob / (len(t.ids) + 1) ** penalty  # noqa: E731
        for chosen, unpenalised in zip(translate(model, task, english, 3, penalty), plain):
            assert rank(chosen) >= rank(unpenalised) - 1e-5  # the best beam under this penalty


def tiny_model(task, seed=0):
    torch.manual_seed(seed)
    return Seq2SeqTransformer(task.model_config(d_model=16, num_heads=2, num_encoder_layers=1,
                                                num_decoder_layers=1, dropout=0.0)).eval()


@pytest.mark.parametrize("subwords", [None, 40])
def test_validation_test_and_training_english_never_overlap(subwords):
    task = prepare_task(made_up_pairs(600), test_fraction=0.1, valid_fraction=0.1, min_freq=1,
                        subwords=subwords)
    train_english = {tuple(s) for s, _ in task.train}
    valid, test = ({normalize_text(en) for en, _ in part} for part in (task.valid, task.test))
    assert valid and test and not valid & test
    for part in (task.valid, task.test):
        assert not train_english & {tuple(task.source_ids(en)) for en, _ in part}


def test_subwords_give_one_joint_vocabulary_shared_by_the_embeddings_and_invert_exactly():
    pairs = made_up_pairs() + [("Tom has 42 cats.", "Tom tiene 42 gatos.")] * 3
    task = prepare_task(pairs, test_fraction=0.2, min_freq=1, subwords=40)
    assert task.joint and len(task.src_vocab) == len(task.tgt_vocab)
    model = tiny_model(task)
    assert model.src_embed.table.weight is model.tgt_embed.table.weight is model.output.weight
    for text in ("Tom tiene 42 gatos.", "el  gato\u00adrojo corre.", "Tom ve 42 perros."):
        assert task.target_text(task.source_ids(text)) == clean(text)  # case, digits, accents kept
    assert task.target_text(task.source_ids("¿Qué?")) == "<unk><unk>u<unk><unk>"  # ¿ Q é ? unseen
    assert task.max_len == max(len(ids) - 2 for pair in task.train for ids in pair)  # in subwords


def test_translate_never_writes_unk_even_when_the_model_prefers_it():
    task = prepare_task(made_up_pairs(), test_fraction=0.2, min_freq=1)
    model = tiny_model(task)
    model.output.register_forward_hook(lambda m, i, logits: logits.index_add(
        -1, torch.tensor([UNK]), torch.full((*logits.shape[:-1], 1), 50.0)))
    src = torch.tensor([task.source_ids("the cat runs.")])
    free, _ = greedy_decode(model, src, max_len=5, sos=SOS, eos=EOS, pad=PAD)
    assert free[0] == [UNK] * 5  # unconstrained, the model writes only <unk>
    for k in (1, 3):
        assert all(UNK not in t.ids for t in translate(model, task, ["the cat runs.", "a dog."], beam_size=k))
        allowed = translate(model, task, ["the cat runs."], beam_size=k, banned=())
        assert allowed[0].ids == [UNK] * len(allowed[0].ids) != []  # banned=() lets it through


def test_choose_decoding_scores_every_setting_on_the_validation_split():
    task = prepare_task(made_up_pairs(600), test_fraction=0.1, valid_fraction=0.1, min_freq=1)
    choice = choose_decoding(tiny_model(task), task, beam_sizes=(1, 2), length_penalties=(0.0, 1.0))
    settings = [(row["beam_size"], row["length_penalty"]) for row in choice["table"]]
    assert settings == [(1, 0.0), (2, 0.0), (2, 1.0)] and choice["chosen_on"] == "valid"
    best = max(choice["table"], key=lambda row: row["valid_bleu"])
    assert (choice["beam_size"], choice["length_penalty"]) == (best["beam_size"], best["length_penalty"])
    assert heldout_bleu(tiny_model(task), task, beam_size=2, length_penalty=1.0, split="valid")["bleu"] == \
        pytest.approx(choice["table"][2]["valid_bleu"])
    with pytest.raises(ValueError, match="'train'"):
        heldout_bleu(tiny_model(task), task, split="train")


def test_choose_weights_keeps_whichever_scores_higher_on_validation():
    task = prepare_task(made_up_pairs(600), test_fraction=0.1, valid_fraction=0.1, min_freq=1)
    model, other = tiny_model(task, seed=0), tiny_model(task, seed=1)
    kept = LastWeights(keep=1)
    kept(other)  # the "average" is another model's weights
    before = {k: v.clone() for k, v in model.state_dict().items()}
    choice = choose_weights(model, task, kept)
    scores = choice["valid_bleu"]
    expected = before if scores["final"] >= scores["averaged"] else other.state_dict()
    assert choice["weights"] == max(scores, key=scores.get) and choice["chosen_on"] == "valid"
    assert choice["averaged_last"] == 1  # chapter 6 prints it, in a branch its fast and cpu runs do not take
    assert all(torch.equal(model.state_dict()[k], expected[k]) for k in expected)
    assert scores["averaged"] == pytest.approx(heldout_bleu(other, task, beam_size=1, split="valid")["bleu"])


@pytest.mark.parametrize("subwords", [None, 40])
def test_translate_with_and_without_the_cache_agree(subwords):
    task = prepare_task(made_up_pairs(), test_fraction=0.2, min_freq=1, subwords=subwords)
    model, english = tiny_model(task), ["the cat sees a dog.", "a big dog runs.", "red."]
    for k in (1, 3):
        cached, uncached = (translate(model, task, english, beam_size=k, use_cache=c) for c in (True, False))
        assert [t.ids for t in cached] == [t.ids for t in uncached]
        assert [t.log_prob for t in cached] == pytest.approx([t.log_prob for t in uncached], abs=1e-4)


def test_a_validation_fraction_that_leaves_no_training_side_is_refused():
    with pytest.raises(ValueError, match=r"valid_fraction must lie in \[0, 1 - test_fraction\).*got 0.9"):
        prepare_task(made_up_pairs(), test_fraction=0.2, valid_fraction=0.9)


def test_bleu_conditions_count_references_overlap_and_case():
    pairs = made_up_pairs()
    split = split_by_english(pairs, test_fraction=0.2, seed=0)
    pairs += [(split.test[0][0], es) for _, es in split.train[:5]]  # training targets as references
    task = prepare_task(pairs, test_fraction=0.2, min_freq=1)
    shouted = [refs[0].upper() for _, refs in task.test]  # right words, wrong case
    c = bleu_conditions(task, shouted)
    assert c["one_reference"] == pytest.approx(100.0) and c["one_reference_cased"] < 1.0
    assert c["references"] == sum(len(refs) for _, refs in task.test) / len(task.test)
    assert c["longest"] == max(len(tokenize(en)) for en, _ in task.test) and c["sentences"] == len(task.test)
    seen = {tuple(task.tgt_vocab.decode(tgt)) for _, tgt in task.train}
    by_hand = sum(any(tuple(tokenize(r)) in seen for r in refs) for _, refs in task.test)
    assert 0 < by_hand < len(task.test) and c["in_training"] == by_hand / len(task.test)
    assert all(len(line) <= 80 for line in describe_conditions(c).splitlines())
    with pytest.raises(ValueError, match=f"need 1 to {len(task.test)} hypotheses.*got 0"):
        bleu_conditions(task, [])


def test_bleu_by_length_scores_each_bucket_on_its_own_sentences():
    task = prepare_task(made_up_pairs(), max_len=6, test_fraction=0.2, min_freq=1)
    lengths = [len(tokenize(en)) for en, _ in task.test]
    hyps = [refs[0] if n >= 5 else "nada" for n, (_, refs) in zip(lengths, task.test)]  # long ones exact
    rows = bleu_by_length(task, hyps, width=1)
    assert [r["shortest"] for r in rows] == sorted(set(lengths)) == [3, 4, 5, 6]
    assert [r["sentences"] for r in rows] == [lengths.count(n) for n in sorted(set(lengths))]
    assert [round(r["bleu"]) for r in rows] == [0, 0, 100, 100]
    assert [r["exact"] for r in rows] == [0.0, 0.0, 1.0, 1.0]
    assert [r["sentences"] for r in bleu_by_length(task, hyps, width=2)] == [
        lengths.count(3) + lengths.count(4), lengths.count(5) + lengths.count(6)]
    with pytest.raises(ValueError, match="width must be an int >= 1.*got 0"):
        bleu_by_length(task, hyps, width=0)


def test_bleu_by_length_buckets_do_not_depend_on_the_length_limit():
    """Chapters 5 and 6 keep other length limits (6 and 5 tokens): their rows for the lengths
    both hold score the same sentences, so the two tables compare row by row (issue 66)."""
    pairs = made_up_pairs()
    longer, shorter = (prepare_task(pairs, max_len=n, test_fraction=0.2, min_freq=1) for n in (6, 4))
    shared = [(en, refs) for en, refs in longer.test if len(tokenize(en)) <= shorter.max_len]
    assert sorted(shared) == sorted(shorter.test) and len(shared) < len(longer.test)
    hyps = {en: refs[0] if len(tokenize(en)) == 4 else "nada" for en, refs in longer.test}
    rows = {n: bleu_by_length(t, [hyps[en] for en, _ in t.test]) for n, t in ((6, longer), (4, shorter))}
    assert [(r["shortest"], r["longest"]) for r in rows[6]] == [(3, 3), (4, 4), (5, 5), (6, 6)]
    assert rows[4] == rows[6][:2]  # the same edges and numbers on the shared sentences
    assert [r["exact"] for r in rows[4]] == [0.0, 1.0]
    wide = [bleu_by_length(t, [hyps[en] for en, _ in t.test], width=4) for t in (longer, shorter)]
    assert [(r["shortest"], r["longest"]) for r in wide[0]] == [(1, 4), (5, 8)]  # not 1..max_len
    assert wide[1] == wide[0][:1]
