"""Chapter 1's plausible wrong answers: each must fail every hidden test of its question."""

LOOKUP = '''
def lookup_projections(names, facts, marker):
    basis = torch.cat([names, facts, marker[None]]).double()
    dual = torch.linalg.pinv(basis)
    R, N_n = basis.shape[0], names.shape[0]
    S = torch.zeros(R, R, dtype=torch.float64)
    S[:N_n, :N_n] = torch.eye(N_n, dtype=torch.float64)
    {marker}
    return ({strength}dual @ S).float(), dual.float()
'''

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "divides by d_k, not its square root": '''
def attention(q, k, v):
    weights = (q @ k.transpose(-2, -1) / q.shape[-1]).softmax(dim=-1)
    return weights @ v, weights
''',
        "softmax over the queries (dim=-2), not the keys": '''
def attention(q, k, v):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-2)
    return weights @ v, weights
''',
        "scales after the softmax (the lecture's code)": '''
def attention(q, k, v):
    weights = (q @ k.transpose(-2, -1)).softmax(dim=-1) / math.sqrt(q.shape[-1])
    return weights @ v, weights
''',
        "k.T reverses every axis of a batch": '''
def attention(q, k, v):
    weights = (q @ k.T / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return weights @ v, weights
''',
    },
    "q2": {
        "no 1 / sqrt(d_k)": '''
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return (Q @ K.transpose(-2, -1)).softmax(dim=-1) @ V
''',
        "scales by the model width M instead of d_k": '''
def self_attention(X, W_Q, W_K, W_V):
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    return (Q @ K.transpose(-2, -1) / math.sqrt(X.shape[-1])).softmax(dim=-1) @ V
''',
    },
    "q3": {
        "sigma * sqrt(d_k): the standard deviation, not the variance, of one factor": '''
def score_scale(d_k, sigma):
    return sigma * math.sqrt(d_k)
''',
        "sqrt(d_k): ignores sigma": '''
def score_scale(d_k, sigma):
    return math.sqrt(d_k)
''',
        "sigma**2 * d_k: the variance, not the standard deviation, of the score": '''
def score_scale(d_k, sigma):
    return sigma ** 2 * d_k
''',
    },
    "q4": {
        "shifts the wrong way: every word attends to the previous one": '''
def next_word_projections(X):
    N = X.shape[0]
    X_pinv = torch.linalg.pinv(X.double())
    strength = math.sqrt(N) * (math.log(9 * N) + 5)
    shift = torch.diag(torch.ones(N - 1, dtype=torch.float64), 1)
    return X_pinv.float(), (strength * X_pinv @ shift).float()
''',
        "the right pattern with no strength: the softmax stays flat": '''
def next_word_projections(X):
    N = X.shape[0]
    X_pinv = torch.linalg.pinv(X.double())
    shift = torch.diag(torch.ones(N - 1, dtype=torch.float64), 1)
    return X_pinv.float(), (X_pinv @ shift.T).float()
''',
        "ignores X: shifts the feature axis instead of the words": '''
def next_word_projections(X):
    M = X.shape[1]
    return 20 * torch.eye(M), torch.roll(torch.eye(M), 1, dims=1)
''',
    },
    "q5": {
        "rewards a shared name only: the question matches itself as well": LOOKUP.format(
            marker="", strength="50 * "),
        "the right form with no strength: the softmax stays flat": LOOKUP.format(
            marker="S[-1, -1] = -1.0", strength=""),
        "W_Q = W_K = I: every key that resembles the question": '''
def lookup_projections(names, facts, marker):
    M = names.shape[1]
    return 10 * torch.eye(M), torch.eye(M)
''',
    },
}
