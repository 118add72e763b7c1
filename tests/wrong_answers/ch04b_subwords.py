"""Chapter 4b's plausible wrong answers: each must fail every hidden test of its question."""

MERGE = '''
def _merge(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if tuple(symbols[i:i + 2]) == tuple(pair):
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)
'''

TRAIN_BYTES = '''
def train_byte_bpe(texts, num_merges):
    sequences, merges = [{ids} for t in texts], []
    for k in range(num_merges):
        counts = Counter(p for ids in sequences for p in zip(ids, ids[1:]))
        if not counts or max(counts.values()) < 2:
            break
        best = {best}
        merges.append(best)
        sequences = [_join_ids(ids, best, 256 + k) for ids in sequences]
    return merges
'''
DECODE_BYTES = '''
def decode_bytes(ids, merges):
    table = {{i: {piece} for i in range(256)}}
    for k, (left, right) in enumerate(merges):
        table[256 + k] = table[left] + table[right]
    return {joined}
'''
UTF8, LARGEST = 'list(t.encode("utf-8"))', "max(counts, key=lambda p: (counts[p], p))"
BYTES = TRAIN_BYTES.format(ids=UTF8, best=LARGEST) + DECODE_BYTES.format(
    piece="bytes([i])", joined='b"".join(table[i] for i in ids).decode("utf-8")')

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "ignores how often each word occurs": '''
def count_pairs(corpus):
    pairs = Counter()
    for symbols in corpus:
        for pair in zip(symbols, symbols[1:]):
            pairs[pair] += 1
    return dict(pairs)
''',
        "counts a pair once per word (a set of pairs)": '''
def count_pairs(corpus):
    pairs = Counter()
    for symbols, n in corpus.items():
        for pair in set(zip(symbols, symbols[1:])):
            pairs[pair] += n
    return dict(pairs)
''',
    },
    "q2": {
        "str.replace on the space-joined word (merges parts of symbols)": '''
def merge_pair(corpus, pair):
    new_corpus, joined = {}, 0
    for symbols, n in corpus.items():
        merged = tuple(" ".join(symbols).replace(" ".join(pair), "".join(pair)).split(" "))
        new_corpus[merged] = n
        joined += (len(symbols) - len(merged)) * n
    return new_corpus, joined
''',
        "joined counts the pair's occurrences, overlapping ones too": MERGE + '''
def merge_pair(corpus, pair):
    new_corpus, joined = {}, 0
    for symbols, n in corpus.items():
        new_corpus[_merge(symbols, pair)] = n
        joined += sum(p == tuple(pair) for p in zip(symbols, symbols[1:])) * n
    return new_corpus, joined
''',
    },
    "q3": {
        "forgets the end-of-word marker": MERGE + '''
def apply_merges(word, merges):
    rank = {tuple(p): i for i, p in reversed(list(enumerate(merges)))}
    symbols, applied = tuple(word), []
    while True:
        present = [p for p in zip(symbols, symbols[1:]) if p in rank]
        if not present:
            return list(symbols), applied
        best = min(present, key=rank.get)
        applied.append(best)
        symbols = _merge(symbols, best)
''',
        "merges the leftmost learned pair, not the earliest learned": MERGE + '''
def apply_merges(word, merges):
    learned = {tuple(p) for p in merges}
    symbols, applied = tuple(word[:-1]) + (word[-1] + "</w>",), []
    while True:
        present = [p for p in zip(symbols, symbols[1:]) if p in learned]
        if not present:
            return list(symbols), applied
        applied.append(present[0])
        symbols = _merge(symbols, present[0])
''',
    },
    "q4": {
        "ties go to the smallest pair": '''
def learn_merges(corpus, num_merges):
    merges = []
    for _ in range(num_merges):
        pairs = count_pairs(corpus)
        if not pairs:
            break
        best = min(p for p in pairs if pairs[p] == max(pairs.values()))
        if pairs[best] < 2:
            break
        merges.append(best)
        corpus, _ = merge_pair(corpus, best)
    return merges
''',
        "ties go to the first pair counted (dict order)": '''
def learn_merges(corpus, num_merges):
    merges = []
    for _ in range(num_merges):
        pairs = count_pairs(corpus)
        if not pairs:
            break
        best = max(pairs, key=pairs.get)
        if pairs[best] < 2:
            break
        merges.append(best)
        corpus, _ = merge_pair(corpus, best)
    return merges
''',
    },
    "q5": {
        "recounts the merged words and returns their counts, not the changes": MERGE + '''
def pair_count_changes(words, pair):
    merged, counts = {}, Counter()
    for symbols, n in words.items():
        out = _merge(symbols, pair)
        merged[out] = merged.get(out, 0) + n
    for symbols, n in merged.items():
        for p in zip(symbols, symbols[1:]):
            counts[p] += n
    return merged, dict(counts)
''',
        "adds the new pairs but never subtracts the old ones": MERGE + '''
def pair_count_changes(words, pair):
    merged, changes = {}, Counter()
    for symbols, n in words.items():
        out = _merge(symbols, pair)
        for p in zip(out, out[1:]):
            if pair[0] + pair[1] in p:
                changes[p] += n
        changes[tuple(pair)] -= n * sum(1 for p in zip(symbols, symbols[1:]) if p == tuple(pair))
        merged[out] = merged.get(out, 0) + n
    return merged, {p: c for p, c in changes.items() if c}
''',
        "keeps the pairs whose change is 0 (every pair of the word listed)": MERGE + '''
def pair_count_changes(words, pair):
    merged, changes = {}, {}
    for symbols, n in words.items():
        out = _merge(symbols, pair)
        for p in zip(symbols, symbols[1:]):
            changes[p] = changes.get(p, 0) - n
        for p in zip(out, out[1:]):
            changes[p] = changes.get(p, 0) + n
        merged[out] = merged.get(out, 0) + n
    return merged, changes
''',
    },
    "q6": {
        "compares the first merge only (0 or None)": '''
def first_difference(corpus, num_merges):
    counts = Counter()
    for symbols, n in corpus.items():
        for p in zip(symbols, symbols[1:]):
            counts[p] += n
    top = max(counts.values(), default=0)
    if top < 2 or num_merges < 1:
        return None
    return 0 if sum(c == top for c in counts.values()) > 1 else None
''',
        "counts merges from 1": '''
def first_difference(corpus, num_merges):
    def learn(corpus, pick):
        merges = []
        for _ in range(num_merges):
            counts = Counter()
            for symbols, n in corpus.items():
                for p in zip(symbols, symbols[1:]):
                    counts[p] += n
            top = max(counts.values(), default=0)
            if top < 2:
                break
            best = pick(p for p, c in counts.items() if c == top)
            merges.append(best)
            corpus, _ = merge_pair(corpus, best)
        return merges

    a, b = learn(corpus, max), learn(corpus, min)
    return next((i + 1 for i in range(max(len(a), len(b))) if a[i:i + 1] != b[i:i + 1]), None)
''',
    },
    "q7": {
        "ties to the first pair counted, not the largest": BYTES + TRAIN_BYTES.format(
            ids=UTF8, best="counts.most_common(1)[0][0]"),
        "merges over code points, decodes code points": TRAIN_BYTES.format(
            ids="[ord(c) for c in t]", best=LARGEST) + DECODE_BYTES.format(
            piece="chr(i)", joined='"".join(table.get(i, chr(i)) for i in ids)'),
        "trains on the texts joined into one (pairs across text boundaries)": TRAIN_BYTES.format(
            ids=UTF8, best=LARGEST).replace("for t in texts]", 'for t in ["".join(texts)]]') + DECODE_BYTES.format(
            piece="bytes([i])", joined='b"".join(table[i] for i in ids).decode("utf-8")'),
        "decodes each token on its own (splits multi-byte characters)": BYTES + DECODE_BYTES.format(
            piece="bytes([i])", joined='"".join(table[i].decode("utf-8", errors="replace") for i in ids)'),
    },
}
