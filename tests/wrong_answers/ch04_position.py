"""Chapter 4's plausible wrong answers: each must fail every hidden test of its question."""

ROPE = '''
def rope(x, base=10000.0):
    L, d = x.shape[-2:]
    angles = torch.arange(L, dtype=torch.float32)[:, None] * {omega}
    cos, sin = angles.cos(), angles.sin()
    {pairs}
    return torch.{join}
'''
OMEGA = "base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)"
EVEN_ODD = "even, odd = x[..., 0::2], x[..., 1::2]"
STACK = "stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)"
OFFSET = '''
def recover_offset(pe_a, pe_b, base=10000.0):
    d = pe_a.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    a = torch.atan2(pe_a[0::2].double(), pe_a[1::2].double())
    b = torch.atan2(pe_b[0::2].double(), pe_b[1::2].double())
    turned = b - a
'''
ALIBI = '''
def alibi_bias(length, num_heads):
    m = {slopes}
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    bias = {sign}torch.tensor(m)[:, None, None] * (i - j).float()
    return {masked}
'''
POW2 = "[2 ** (-8 * h / num_heads) for h in range(1, num_heads + 1)]"

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "exponent -i / d_model with i = 0, 1, ... (not -2i / d_model)": '''
def frequencies(d_model, base=10000.0):
    return base ** (-torch.arange(d_model // 2, dtype=torch.float32) / d_model)
''',
        "wavelengths instead of angular frequencies": '''
def frequencies(d_model, base=10000.0):
    return base ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
''',
    },
    "q2": {
        "sin in the first half of the columns, cos in the second": '''
def sinusoidal_encoding(length, d_model, base=10000.0):
    angles = torch.arange(length, dtype=torch.float32)[:, None] * frequencies(d_model, base)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
''',
        "cos in the even columns, sin in the odd": '''
def sinusoidal_encoding(length, d_model, base=10000.0):
    angles = torch.arange(length, dtype=torch.float32)[:, None] * frequencies(d_model, base)
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.cos(angles)
    pe[:, 1::2] = torch.sin(angles)
    return pe
''',
    },
    "q3": {
        "rotates the wrong way (the matrix of a shift by -k)": '''
def shift_matrix(k, d_model, base=10000.0):
    theta = k * frequencies(d_model, base).double()
    c, s = torch.cos(theta), torch.sin(theta)
    blocks = [torch.tensor([[ci, -si], [si, ci]]) for ci, si in zip(c.tolist(), s.tolist())]
    return torch.block_diag(*blocks).float()
''',
        "one angle k for every pair (forgets the frequencies)": '''
def shift_matrix(k, d_model, base=10000.0):
    c, s = math.cos(k), math.sin(k)
    return torch.block_diag(*[torch.tensor([[c, s], [-s, c]])] * (d_model // 2)).float()
''',
    },
    "q4": {
        "pairs the halves (i, i + d/2), not neighbours (2i, 2i + 1)": ROPE.format(
            omega=OMEGA, pairs="even, odd = x[..., : d // 2], x[..., d // 2:]",
            join="cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)"),
        "turns by p * omega_i with omega from base ** (-i / d)": ROPE.format(
            omega="base ** (-torch.arange(d // 2, dtype=torch.float32) / d)", pairs=EVEN_ODD, join=STACK),
        "turns the other way (p * omega_i clockwise)": ROPE.format(
            omega=OMEGA, pairs=EVEN_ODD, join="stack([even * cos + odd * sin, odd * cos - even * sin], dim=-1).flatten(-2)"),
    },
    "q5": {
        "compares frequencies, not wavelengths, with the target": '''
def closest_wavelength(target, d_model, base=10000.0):
    return int((frequencies(d_model, base).double() - target).abs().argmin())
''',
        "wavelength 1 / omega_i (forgets the 2 pi)": '''
def closest_wavelength(target, d_model, base=10000.0):
    return int((1 / frequencies(d_model, base).double() - target).abs().argmin())
''',
    },
    "q6": {
        "the fastest pair alone: blind to whole turns": OFFSET + '''
    return round(float(turned[0] / omega[0]))
''',
        "the slowest pair alone: noise moves it by a whole position": OFFSET + '''
    wrapped = torch.remainder(turned[-1] + math.pi, 2 * math.pi) - math.pi
    return round(float(wrapped / omega[-1]))
''',
        "angles from atan2(cos, sin): the sign flips": '''
def recover_offset(pe_a, pe_b, base=10000.0):
    d = pe_a.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    a = torch.atan2(pe_a[1::2].double(), pe_a[0::2].double())
    b = torch.atan2(pe_b[1::2].double(), pe_b[0::2].double())
    turned, k = b - a, 0.0
    for i in reversed(range(d // 2)):
        wraps = torch.round((k * omega[i] - turned[i]) / (2 * math.pi))
        k = float((turned[i] + 2 * math.pi * wraps) / omega[i])
    return round(k)
''',
    },
    "q7": {
        "the power-of-two slopes for every head count": ALIBI.format(
            slopes=POW2, sign="-", masked='bias.masked_fill(j > i, float("-inf"))'),
        "+m (i - j): rewards distant keys": ALIBI.format(
            slopes=POW2, sign="", masked='bias.masked_fill(j > i, float("-inf"))'),
        "no causal mask: -m |i - j| on both sides": ALIBI.format(
            slopes=POW2, sign="-", masked="bias.abs().neg()"),
    },
}
