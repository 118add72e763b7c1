"""Whole models built from ``xfl.blocks`` (chapters 5, 6, 9, 10 and 11: the encoder-decoder of
chapters/ch05_encoder_decoder/translation.md and the decoder-only model of chapter 9).

``Seq2SeqTransformer`` is the encoder-decoder of Vaswani et al. (2017): an encoder stack
(self-attention) and a decoder stack (causal self-attention + cross-attention), token
embeddings scaled by √d plus sinusoidal positions, and a linear output projection.
``norm_first=False`` gives Kak's post-LN "First Generation" (FG) model, ``True`` the
Pre-LN model of Xiong et al. (2020). ``GPT`` is the decoder-only variant: the same blocks
without cross-attention, under a causal mask; its config can make it GPT's own design (GELU
feed-forward, learned positions: Radford et al., 2018) and, with ``causal=False``, an
encoder-only model for masked-token training. Chapter 10's options (RMSNorm, rotary positions,
SwiGLU, grouped-query attention, QK-norm, no biases, zero-initialised output projections) and
GPT-2's exact block (tanh GELU, unscaled embeddings) are fields of ``GPTConfig``;
``GPTConfig.modern(...)`` turns them all on (in the book's block: ``xfl.hf_bridge`` maps it onto
Hugging Face's Llama and Qwen3).

Token tensors are ``(B, L)`` long; ``pad_id`` marks padding, which no query attends to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

import torch
from torch import Tensor, nn

from .attention import causal_padding_mask, checks_values, key_mask
from .blocks import ACTIVATIONS, FFNS, TransformerStack
from .cache import StackCache, new_stack_cache, stack_step
from .memory import check_fits
from .norms import NORMS
from .position import sinusoidal_encoding


# ---------------------------------------------------------------------- embeddings
POSITIONS = ("sinusoidal", "learned", "rope", "none")
ADDED_POSITIONS = ("sinusoidal", "learned")  # the codes added to the embedding; rope rotates q, k


def check_token_ids(tokens: Tensor, vocab_size: int, name: str = "token ids",
                    read_back: bool | None = None) -> None:
    """Raise ValueError unless ``tokens`` is an integer tensor of ids in ``[0, vocab_size)``.

    The range is read on the CPU, and on an accelerator with ``read_back`` (None: when autograd
    is off, i.e. inference); a training step on an accelerator skips it, since reading it back
    would make the step wait.
    """
    if not isinstance(tokens, Tensor) or tokens.is_floating_point() or tokens.is_complex() \
            or tokens.dtype == torch.bool:
        got = tokens.dtype if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"{name} must be an integer tensor, got {got}")
    read_back = not torch.is_grad_enabled() if read_back is None else read_back
    if tokens.numel() == 0 or (tokens.device.type != "cpu" and not read_back) or not checks_values():
        return
    _check_range(tokens, vocab_size, name)


def check_nonempty(tokens: Tensor, name: str, weight: Tensor | None = None) -> None:
    """Raise ValueError unless ``tokens`` is ``(B, L)`` with at least one row and one token (and on
    ``weight``'s device, when given)."""
    if isinstance(tokens, Tensor) and (tokens.ndim != 2 or 0 in tokens.shape):
        raise ValueError(f"{name} must be (B, L) token ids with B >= 1 and L >= 1, "
                         f"got shape {tuple(tokens.shape)}")
    if isinstance(tokens, Tensor) and weight is not None and tokens.device != weight.device:
        raise ValueError(f"{name} are on {tokens.device}, the model on {weight.device}; expected one "
                         f"device (move them with {name}.to({str(weight.device)!r}))")


def check_weights_fit(config, layer_fields: tuple[str, ...], vocab_fields: tuple[str, ...],
                      cross_layers: int = 0) -> None:
    """Refuse, before allocating, a config whose weights alone exceed the default device's memory:
    at least 2·d² (W_Q, W_O) per attention, 2·d·d_hidden per feed-forward (d_hidden = 2·d when
    None, below every ffn's default), and d per row of each embedding and position table."""
    d, h = config.d_model, config.d_hidden or 2 * config.d_model
    layers = sum(getattr(config, name) for name in layer_fields)
    rows = sum(getattr(config, name) + config.max_len for name in vocab_fields)
    weights = layers * (2 * d * d + 2 * d * h) + cross_layers * 2 * d * d + rows * d
    dtype = torch.get_default_dtype()
    fields = ", ".join(f"{k}={getattr(config, k)}"
                       for k in ("d_model", "d_hidden", "max_len", *layer_fields, *vocab_fields))
    check_fits(weights * dtype.itemsize, None, f"{type(config).__name__}({fields}) gives at least "
               f"{weights:,} {str(dtype).removeprefix('torch.')} weights", "a smaller d_model (its square "
               f"counts), d_hidden, {', '.join(layer_fields)}, {', '.join(vocab_fields)} or max_len")


def _check_range(tokens: Tensor, vocab_size: int, name: str) -> None:
    low, high = tokens.aminmax()
    if low < 0 or high >= vocab_size:
        bad = int(low) if low < 0 else int(high)
        raise ValueError(f"{name} must lie in [0, {vocab_size - 1}] (a vocabulary of {vocab_size}), "
                         f"got {bad}")


class TokenEmbedding(nn.Module):
    """Token ids ``(B, L)`` -> ``(B, L, D)``: √D · embedding + position, dropout.

    The table is initialised with std 1/√D, so the scaled embedding has unit variance, the
    same order as the sinusoidal code it is added to. ``positions="learned"`` adds a trained
    ``(max_len, D)`` table instead (GPT's choice), initialised with std 0.02 as in GPT-2;
    ``"rope"`` and ``"none"`` add nothing (rotary positions act inside attention).
    ``scale=False`` drops the √D (GPT-2, whose table then starts with std 0.02).
    ``forward(tokens, start)`` embeds tokens at positions ``start, start + 1, ...`` (a decoding
    step with a key-value cache embeds only its newest token).
    """

    def __init__(self, vocab_size: int, d_model: int, max_len: int, dropout: float, pad_id: int,
                 positions: str = "sinusoidal", scale: bool = True):
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        self.table = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.table.weight, std=d_model ** -0.5 if scale else 0.02)
        with torch.no_grad():
            self.table.weight[pad_id].zero_()
        if positions == "learned":
            self.positions = nn.Parameter(torch.randn(max_len, d_model) * 0.02)  # (max_len, D)
        elif positions == "sinusoidal":
            self.register_buffer("positions", sinusoidal_encoding(max_len, d_model), persistent=False)
        else:
            self.positions = None
        self.drop, self.max_len = nn.Dropout(dropout), max_len
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, tokens: Tensor, start: int = 0) -> Tensor:
        check_token_ids(tokens, self.table.num_embeddings)
        end = start + tokens.shape[-1]
        if end > self.max_len:
            raise ValueError(f"sequence length {end} exceeds max_len={self.max_len}")
        try:
            x = self.table(tokens) * self.scale  # (B, L, D)
        except IndexError:  # unchecked (a training step): name the bad id now, at no cost before
            _check_range(tokens, self.table.num_embeddings, "token ids")
            raise
        if self.positions is not None:
            x = x + self.positions[start:end]
        return self.drop(x)


def _init_linear_weights(module: nn.Module) -> None:
    """Xavier-uniform for every Linear weight (the Annotated Transformer's choice), zero biases."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def output_projection(embedding: "TokenEmbedding", vocab: int, tie: bool) -> nn.Linear:
    """``(B, L, D) -> (B, L, vocab)`` logits; shares ``embedding``'s table when ``tie``."""
    d_model = embedding.table.embedding_dim
    output = nn.Linear(d_model, vocab, bias=False)
    if tie:
        output.weight = embedding.table.weight
    else:
        nn.init.normal_(output.weight, std=d_model ** -0.5)
    return output


@dataclass(kw_only=True)
class BlockConfig:
    """What every text model's config shares. ``tie_output`` shares the (target) embedding with
    the output projection (Press & Wolf, 2017); ``d_hidden=None`` means 4·d_model (2/3 of that
    for a gated ``ffn``). Chapter 10's block options, each off by default: ``norm="rms"``,
    ``ffn="swiglu"``/``"geglu"``, ``num_kv_heads`` (grouped-query attention), ``qk_norm``,
    ``bias=False`` (every Linear and LayerNorm)."""

    d_model: int = 256
    num_heads: int = 8
    d_hidden: int | None = None
    dropout: float = 0.1
    norm_first: bool = True
    max_len: int = 128
    tie_output: bool = True
    pad_id: int = 0
    norm: str = "layer"
    ffn: str = "mlp"
    num_kv_heads: int | None = None
    qk_norm: bool = False
    bias: bool = True

    def check_sizes(self, *vocabularies: str) -> None:
        """Refuse a width, head count, ``max_len`` or vocabulary (the named fields) below 1."""
        for name in ("d_model", "num_heads", "max_len", *vocabularies):
            value = getattr(self, name)
            if not isinstance(value, Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{type(self).__name__}.{name} must be an int >= 1, got {value!r}")

    def check_names(self) -> None:
        """Refuse an unknown norm or feed-forward name."""
        for name, allowed in (("norm", NORMS), ("ffn", FFNS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {tuple(allowed)}, got {getattr(self, name)!r}")

    def block_options(self) -> dict:
        """The keyword options of ``TransformerBlock`` this config asks for."""
        return dict(norm=self.norm, ffn=self.ffn, num_kv_heads=self.num_kv_heads, qk_norm=self.qk_norm,
                    bias=self.bias)


# -------------------------------------------------------------------- encoder-decoder
@dataclass
class Seq2SeqConfig(BlockConfig):
    """Sizes of a ``Seq2SeqTransformer``: the vocabularies and stack depths, then ``BlockConfig``.
    ``share_embeddings`` gives source and target one embedding table (a joint vocabulary, as in
    Vaswani et al., 2017); with ``tie_output`` the output projection shares it too."""

    src_vocab: int
    tgt_vocab: int
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    share_embeddings: bool = False

    def __post_init__(self):
        self.check_sizes("src_vocab", "tgt_vocab")
        self.check_names()
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(f"share_embeddings needs one joint vocabulary, got src_vocab="
                             f"{self.src_vocab} and tgt_vocab={self.tgt_vocab}")


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder transformer: ``forward(src (B, S), tgt_in (B, L)) -> logits (B, L, V)``."""

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        c = self.config = config
        check_weights_fit(c, ("num_encoder_layers", "num_decoder_layers"), ("src_vocab", "tgt_vocab"),
                          cross_layers=c.num_decoder_layers)
        stack = dict(d_model=c.d_model, num_heads=c.num_heads, d_hidden=c.d_hidden,
                     dropout=c.dropout, norm_first=c.norm_first, **c.block_options())
        self.encoder = TransformerStack(c.num_encoder_layers, cross=False, **stack)
        self.decoder = TransformerStack(c.num_decoder_layers, cross=True, **stack)
        _init_linear_weights(self)
        self.src_embed = TokenEmbedding(c.src_vocab, c.d_model, c.max_len, c.dropout, c.pad_id)
        self.tgt_embed = TokenEmbedding(c.tgt_vocab, c.d_model, c.max_len, c.dropout, c.pad_id)
        if c.share_embeddings:
            self.src_embed.table = self.tgt_embed.table
        self.output = output_projection(self.tgt_embed, c.tgt_vocab, c.tie_output)

    def source_mask(self, src: Tensor) -> Tensor:
        """``(B, S)`` True where ``src`` holds a real token (not padding)."""
        return src != self.config.pad_id

    def encode(self, src: Tensor) -> Tensor:
        """Source tokens ``(B, S)`` -> memory ``(B, S, D)``; padding keys are masked out."""
        check_nonempty(src, "src", self.src_embed.table.weight)
        return self.encoder(self.src_embed(src), mask=key_mask(self.source_mask(src)))

    def decode(self, tgt_in: Tensor, memory: Tensor, src_keep: Tensor) -> Tensor:
        """Decoder input ``(B, L)`` (starts with SOS), memory ``(B, S, D)`` and its
        ``(B, S)`` keep-mask -> next-token logits ``(B, L, V)``. Position i sees tgt_in[:i+1]."""
        check_nonempty(tgt_in, "tgt_in", self.tgt_embed.table.weight)
        x = self.tgt_embed(tgt_in)  # (B, L, D)
        x = self.decoder(x, mask=causal_padding_mask(tgt_in, self.config.pad_id),
                         memory=memory, memory_mask=key_mask(src_keep))
        return self.output(x)  # (B, L, V)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src), self.source_mask(src))

    # incremental decoding: the layers run by xfl.cache on the newest tokens only
    def decoder_cache(self, memory: Tensor, src_keep: Tensor) -> StackCache:
        """An empty key-value cache for ``decode_step``; the cross-attention keys and values of
        ``memory (B, S, D)`` (keep-mask ``(B, S)``) are projected here, once per source batch."""
        return new_stack_cache(self.decoder, memory, src_keep)

    def decode_step(self, tgt_new: Tensor, cache: StackCache) -> Tensor:
        """``decode`` for the newest target tokens ``tgt_new (B, L)`` only, after the t in
        ``cache``: the logits ``(B, L, V)`` equal ``decode(all t + L tokens)[:, -L:]``."""
        x = self.tgt_embed(tgt_new, start=len(cache))  # (B, L, D) at positions t..t+L-1
        return self.output(stack_step(self.decoder, x, tgt_new != self.config.pad_id, cache))


# ------------------------------------------------------------------------ decoder-only
MODERN_OPTIONS = dict(norm="rms", positions="rope", ffn="swiglu", bias=False, qk_norm=True,
                      zero_init=True, tie_output=False)  # GPTConfig.modern, less its kv heads


@dataclass
class GPTConfig(BlockConfig):
    """Sizes of a decoder-only ``GPT``: the vocabulary and depth, then ``BlockConfig`` (output tied
    to the embedding by default). ``activation="gelu"`` and ``positions="learned"`` are GPT's and
    nanoGPT's choices (the defaults keep chapter 5's decoder: ReLU, sinusoids); ``causal=False``
    lets every token see the whole sequence (an encoder-only, masked-token model).

    Chapter 10's options, each off by default: ``norm="rms"``; ``positions="rope"`` (base
    ``rope_base``) or ``"none"``; ``ffn="swiglu"``/``"geglu"`` (hidden 2/3 · 4d unless ``d_hidden``);
    ``num_kv_heads`` (grouped-query attention); ``qk_norm``; ``bias=False`` (every Linear and
    LayerNorm); ``zero_init`` (each block's output projections start at zero); GPT-2's
    ``activation="gelu_tanh"`` and ``scale_embedding=False``; nanochat's ``activation="relu2"``
    and ``norm="rms_plain"`` (no gain). ``GPTConfig.modern`` sets the modern ones."""

    vocab_size: int
    num_layers: int = 4
    activation: str = "relu"
    positions: str = "sinusoidal"
    causal: bool = True
    rope_base: float = 10000.0
    zero_init: bool = False
    scale_embedding: bool = True

    def __post_init__(self):
        self.check_sizes("vocab_size")
        self.check_names()
        for name, allowed in (("activation", sorted(ACTIVATIONS)), ("positions", POSITIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {tuple(allowed)}, got {getattr(self, name)!r}")

    @classmethod
    def modern(cls, **fields) -> "GPTConfig":
        """Today's options on the book's block: RMSNorm, RoPE, SwiGLU, no biases, QK-norm,
        zero-initialised output projections, an untied head and, unless given, half as many kv
        heads as heads (all of them when the count is odd). It keeps the book's dropout (0.1),
        √d embedding scale and Xavier init; ``xfl.hf_bridge`` maps it onto Llama / Qwen3 (equal
        logits in eval mode). ``fields`` override any."""
        heads = fields.get("num_heads", cls.__dataclass_fields__["num_heads"].default)
        options = dict(MODERN_OPTIONS, num_kv_heads=heads // 2 if heads % 2 == 0 else heads)
        return cls(**{**options, **fields})

    def block_options(self) -> dict:
        """``BlockConfig``' options, plus the RoPE base when ``positions="rope"``."""
        return dict(super().block_options(), rope_base=self.rope_base if self.positions == "rope" else None)


class GPT(nn.Module):
    """Decoder-only transformer: ``forward(tokens (B, L)) -> next-token logits (B, L, V)``
    (with ``causal=False``: logits for every position, each seeing the whole sequence)."""

    no_weight_decay = ("embed.positions",)  # read by xfl.train.parameter_groups (learned positions)

    def __init__(self, config: GPTConfig):
        super().__init__()
        c = self.config = config
        check_weights_fit(c, ("num_layers",), ("vocab_size",))
        self.blocks = TransformerStack(c.num_layers, c.d_model, c.num_heads, c.d_hidden, c.dropout,
                                       norm_first=c.norm_first, cross=False, activation=c.activation,
                                       **c.block_options())
        _init_linear_weights(self)
        if c.zero_init:
            _zero_output_layers(self.blocks)
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, c.max_len, c.dropout, c.pad_id, c.positions,
                                    scale=c.scale_embedding)
        self.output = output_projection(self.embed, c.vocab_size, c.tie_output)

    def mask(self, tokens: Tensor) -> Tensor:
        """Causal + padding mask ``(B, 1, L, L)``, or only padding ``(B, 1, 1, L)`` when not causal."""
        pad = self.config.pad_id
        return causal_padding_mask(tokens, pad) if self.config.causal else key_mask(tokens != pad)

    def forward(self, tokens: Tensor) -> Tensor:
        """A causal model on rows without padding passes ``is_causal=True`` to the attention
        instead of a mask, so PyTorch's fused (flash) kernel can run (chapter 10)."""
        check_nonempty(tokens, "tokens", self.embed.table.weight)
        fused = self.config.causal and not bool((tokens == self.config.pad_id).any())
        mask = None if fused else self.mask(tokens)
        x = self.blocks(self.embed(tokens), mask=mask, is_causal=fused)
        return self.output(x)  # (B, L, V)

    # incremental decoding: the layers run by xfl.cache on the newest tokens only
    def new_cache(self) -> StackCache:
        """An empty key-value cache for ``forward_step`` (causal models only: without the causal
        mask, earlier positions see later ones and their keys change with every new token)."""
        if not self.config.causal:
            raise ValueError("a key-value cache needs causal=True, got causal=False")
        return new_stack_cache(self.blocks)

    def forward_step(self, tokens: Tensor, cache: StackCache) -> Tensor:
        """``forward`` for the newest tokens ``(B, L)`` only, after the t in ``cache``: the
        logits ``(B, L, V)`` equal ``forward(all t + L tokens)[:, -L:]``."""
        x = self.embed(tokens, start=len(cache))  # (B, L, D) at positions t..t+L-1
        return self.output(stack_step(self.blocks, x, tokens != self.config.pad_id, cache))


def _zero_output_layers(stack: TransformerStack) -> None:
    """Zero every block's residual-writing projections: each block starts as the identity."""
    for block in stack.layers:
        for layer in block.output_layers():
            nn.init.zeros_(layer.weight)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (a tied weight counts once)."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"count_parameters needs a torch.nn.Module (a model), got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
