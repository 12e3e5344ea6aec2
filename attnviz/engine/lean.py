"""Lean attention: the output and the per-row log-sum-exp without any n x n tensor for all heads.

A lean LayerTrace keeps q, k, v, z, the mask as a rule and the log-sum-exp of each row's logits;
any block of a head's scores or weights is then recomputed exactly, as FlashAttention's backward
pass does: weights = exp(q·kᵀ·scale + M − lse), with M = 0 where the rule allows and −inf where not.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnviz.engine.attention import expand_kv, kv_head

# One query block's logits (every head) hold at most this many cells: 16 MiB in float32, e.g. 8
# heads x 64 rows x 8,192 keys; memory grows with n, never with n².
BLOCK_CELLS = 2**22
# On CUDA a masked rule runs as one fused call with the mask as an additive bias up to this size
# (256 MiB: float32 at 8,192 x 8,192); past it, the blocked path.
BIAS_BYTES = 2**28


@dataclass(frozen=True)
class MaskRule:
    """The mask as a rule, never an n x n tensor: query i (at position i + q_offset) may attend
    key j when `causal` allows (j <= i + q_offset), the window allows (i + q_offset − j < window)
    and keys[j] is True (padding and hidden tokens are False). `keys` is [n_k] for one input, or
    [batch, n_k] while recording a batch. Called as a LayerTrace field, it gives the whole bool
    [n_q, n_k] mask (for short inputs and tests; views ask `allowed` for blocks)."""

    n_q: int
    n_k: int
    causal: bool = False
    window: int | None = None
    keys: torch.Tensor | None = None  # bool [n_k] or [batch, n_k]; None: every key
    q_offset: int = 0

    def allowed(self, rows: torch.Tensor, cols: torch.Tensor, item: int = 0) -> torch.Tensor:
        """May query rows[i] attend key cols[j]: bool [len(rows), len(cols)] (or [batch, r, c]
        while `keys` still has a batch dimension and `item` is None)."""
        dev = self.keys.device if self.keys is not None else rows.device
        qi = (rows.to(dev) + self.q_offset).unsqueeze(-1)  # [r, 1]
        kj = cols.to(dev).unsqueeze(0)  # [1, c]
        ok = torch.ones(len(rows), len(cols), dtype=torch.bool, device=dev)  # [r, c]
        if self.causal:
            ok &= kj <= qi
        if self.window is not None:
            ok &= qi - kj < self.window
        if self.keys is not None:
            keys = self.keys if self.keys.dim() == 1 else self.keys[item]  # [n_k]
            ok &= keys[cols.to(dev)].unsqueeze(0)
        return ok

    def item(self, b: int, n_q: int, n_k: int) -> MaskRule:
        """The rule of batch item b, cut to its first n_q queries and n_k keys."""
        keys = self.keys
        if keys is not None:
            keys = (keys if keys.dim() == 1 else keys[b])[:n_k].to("cpu")  # [n_k]
            if bool(keys.all()):
                keys = None
        return MaskRule(n_q, n_k, self.causal, self.window, keys, self.q_offset)

    @property
    def trivial(self) -> bool:
        """Every query may attend every key."""
        return not self.causal and self.window is None and self.keys is None

    def describe(self) -> str:
        parts = ["causal" if self.causal else "bidirectional"]
        if self.window is not None:
            parts.append(f"window {self.window}")
        if self.keys is not None:
            parts.append(f"{int((~self.keys).sum())} keys masked")
        return ", ".join(parts)

    def __call__(self, layer: object = None, head: int | None = None) -> torch.Tensor:
        return self.allowed(torch.arange(self.n_q), torch.arange(self.n_k))  # [q, k]


def block_rows(n_heads: int, n_k: int) -> int:
    """Query rows per block so that one block's logits of every head stay under BLOCK_CELLS."""
    return max(16, min(4096, BLOCK_CELLS // max(1, n_heads * n_k)))


def key_range(rule: MaskRule, r0: int, r1: int) -> tuple[int, int]:
    """The keys any of the queries r0..r1-1 may see (a causal or windowed rule needs fewer)."""
    hi = min(rule.n_k, r1 + rule.q_offset) if rule.causal else rule.n_k
    lo = 0
    if rule.window is not None:
        lo = max(0, r0 + rule.q_offset - rule.window + 1)
    return lo, max(hi, lo)


def attend_lean(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rule: MaskRule, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q·kᵀ·scale + M) @ v and the log-sum-exp of each row of q·kᵀ·scale + M, for
    q [b, head, n_q, d] and k, v [b, kv_head, n_k, d] (not expanded). Returns z [b, head, n_q, d]
    and lse [b, head, n_q] (float32; 0 for a row with no allowed key, whose z is 0)."""
    b, h, n_q, d = q.shape
    k_full = expand_kv(k, h)  # [b, head, n_k, d]
    v_full = expand_kv(v, h)  # [b, head, n_k, d]
    fast = q.device.type == "cpu" and q.dtype in (torch.float32, torch.bfloat16)
    plain_causal = rule.causal and rule.window is None and rule.keys is None and not rule.q_offset
    if fast and (rule.trivial or plain_causal):
        # torch's fused CPU kernel returns the log-sum-exp it computed anyway
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        z, lse = op(q, k_full, v_full, 0.0, rule.causal, scale=scale)[:2]
        return z, lse.float()  # [b, head, q, d], [b, head, q]
    if q.device.type == "cuda":
        fused = None
        if rule.trivial or (plain_causal and n_q == rule.n_k):
            fused = _cuda_fused(q, k_full, v_full, rule.causal, scale)
        elif b * n_q * rule.n_k * q.element_size() <= BIAS_BYTES:  # a window, padding, an offset
            fused = _cuda_biased(q, k_full, v_full, rule, scale)
        if fused is not None:
            return fused
    z = torch.empty_like(q)  # [b, head, q, d]
    lse = torch.empty(b, h, n_q, dtype=torch.float32, device=q.device)  # [b, head, q]
    step = block_rows(h, rule.n_k)
    for r0 in range(0, n_q, step):
        r1 = min(n_q, r0 + step)
        lo, hi = key_range(rule, r0, r1)
        ok = _allowed(rule, range(r0, r1), range(lo, hi), b, q.device).unsqueeze(1)
        # ok: [b, 1, r, c]; a row with no allowed key gets z = 0 and lse = 0 (weights all 0)
        live = ok.any(-1, keepdim=True)  # [b, 1, r, 1]
        qb = q[:, :, r0:r1].float()  # [b, head, r, d]
        logits = qb @ k_full[:, :, lo:hi].float().transpose(-1, -2) * scale  # [b, head, r, c]
        logits.masked_fill_(~ok, float("-inf")).masked_fill_(~live, 0.0)
        m = logits.logsumexp(-1, keepdim=True)  # [b, head, r, 1]
        w = (logits - m).exp_().masked_fill_(~(ok & live), 0.0)  # [b, head, r, c]
        z[:, :, r0:r1] = (w @ v_full[:, :, lo:hi].float()).to(q.dtype)  # [b, head, r, d]
        lse[:, :, r0:r1] = m.squeeze(-1).masked_fill(~live.squeeze(-1), 0.0)
    return z, lse


def _allowed(rule: MaskRule, rows: range, cols: range, b: int, device) -> torch.Tensor:
    """What each of the b items' queries `rows` may see of keys `cols`: bool [b, r, c] on
    `device` (a rule's key mask may live on the CPU)."""
    r = torch.arange(rows.start, rows.stop, device=device)
    c = torch.arange(cols.start, cols.stop, device=device)
    return torch.stack([rule.allowed(r, c, i) for i in range(b)]).to(device)


def _cuda_fused(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """z and the log-sum-exp from one of torch's fused CUDA kernels (FlashAttention for 16-bit
    inputs, the memory-efficient kernel otherwise), which compute the log-sum-exp anyway for their
    backward pass; None where neither takes these inputs (the blocked path runs instead)."""
    n_q = q.shape[2]
    args = (q.contiguous(), k.contiguous(), v.contiguous())
    tries = []
    if q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] <= 256:
        tries.append(lambda: torch.ops.aten._scaled_dot_product_flash_attention(
            *args, 0.0, causal, False, scale=scale)[:2])  # fmt: skip
    tries.append(lambda: torch.ops.aten._scaled_dot_product_efficient_attention(
        *args, None, True, 0.0, causal, scale=scale)[:2])  # fmt: skip
    for op in tries:
        try:
            z, lse = op()
        except (RuntimeError, NotImplementedError):  # this kernel does not take these inputs
            continue
        return z, lse[..., :n_q].float()  # [b, head, q, d]; the efficient kernel pads rows to 32
    return None


def _cuda_biased(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rule: MaskRule, scale: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """z and the log-sum-exp of any mask rule (Gemma's sliding window, padding, a query offset)
    from torch's memory-efficient CUDA kernel in one call, the rule as an additive bias (0 or
    -inf). The blocked path needs ~10 small kernels per block of rows: at 4,096 tokens Gemma 3's
    trace launched 9,355 kernels against eager's 1,167, its GPU idle two thirds of the time. A
    row with no allowed key gets z = 0 and lse = 0, as in the blocked path; None where the kernel
    does not take these inputs."""
    b, h, n_q, _ = q.shape
    n_k = rule.n_k
    ok = _allowed(rule, range(n_q), range(n_k), b, q.device)  # [b, q, k]
    padded = -(-n_k // 16) * 16  # the kernel wants the bias's rows aligned to 16 elements
    bias = torch.zeros(b, 1, n_q, padded, dtype=q.dtype, device=q.device)[..., :n_k]
    bias.masked_fill_(~ok.unsqueeze(1), float("-inf"))  # [b, 1, q, k]
    try:
        z, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
            q.contiguous(), k.contiguous(), v.contiguous(), bias.expand(b, h, n_q, n_k),
            True, 0.0, False, scale=scale,
        )[:2]  # fmt: skip
    except (RuntimeError, NotImplementedError):
        return None
    live = ok.any(-1).unsqueeze(1)  # [b, 1, q]
    z = z.masked_fill(~live.unsqueeze(-1), 0.0)  # [b, head, q, d]
    return z, lse[..., :n_q].float().masked_fill(~live, 0.0)


def positions_of(sel: slice | torch.Tensor | None, n: int) -> torch.Tensor:
    if sel is None:
        return torch.arange(n)
    if isinstance(sel, slice):
        return torch.arange(n)[sel]
    return torch.as_tensor(sel, dtype=torch.long).reshape(-1)


def lean_block(
    layer: object,
    name: str,
    head: int,
    rows: slice | torch.Tensor | None = None,
    cols: slice | torch.Tensor | None = None,
) -> torch.Tensor:
    """One head's `scores`, `logits`, `weights` or `mask` on rows x cols, recomputed from q, k, the
    mask rule, the scale and the log-sum-exp. CPU float32 (bool for mask). [len(rows), len(cols)]"""
    q, k, rule = layer.stored("q"), layer.stored("k"), layer.rule
    n_q, n_k = q.shape[1], k.shape[1]
    ri, ci = positions_of(rows, n_q), positions_of(cols, n_k)
    if name == "mask":
        return rule.allowed(ri, ci)
    dev = q.device
    qh = q[head, ri.to(dev)].float()  # [r, d]
    kh = k[kv_head(head, q.shape[0], k.shape[0]), ci.to(dev)].float()  # [c, d]
    scores = qh @ kh.T  # [r, c]
    if name == "scores":
        return scores.cpu()
    ok = rule.allowed(ri, ci).to(dev)  # [r, c]
    logits = (scores * layer.scale).masked_fill_(~ok, float("-inf"))  # [r, c]
    if name == "logits":
        return logits.cpu()
    if name != "weights":
        raise ValueError(f"block name={name!r} must be scores, logits, weights or mask")
    lse = layer.stored("lse")[head, ri.to(lse_device(layer))].float().to(dev)  # [r]
    return (logits - lse.unsqueeze(-1)).exp_().masked_fill_(~ok, 0.0).cpu()  # [r, c]


def lse_device(layer: object) -> torch.device:
    return layer.stored("lse").device


def _every_head(layer: object, name: str) -> torch.Tensor:
    return torch.stack([lean_block(layer, name, h) for h in range(layer.n_heads)])


def lean_scores(layer: object, head: int | None = None) -> torch.Tensor:
    """A lean layer's `scores` field: raw q·k of one head [q, k] or of every head [head, q, k]."""
    return _every_head(layer, "scores") if head is None else lean_block(layer, "scores", head)


def lean_weights(layer: object, head: int | None = None) -> torch.Tensor:
    """A lean layer's `weights` field, recomputed exactly: [q, k] for one head, or [head, q, k]."""
    return _every_head(layer, "weights") if head is None else lean_block(layer, "weights", head)


def safe_cols(rule: MaskRule, r0: int, r1: int, c0: int, c1: int) -> tuple[int, int]:
    """Keys c0 <= a..b-1 < c1 every query r0..r1-1 may attend (so no mask is needed there); an
    empty range when `keys` masks some key."""
    if rule.keys is not None:
        return c0, c0
    a, b = c0, c1
    if rule.causal:
        b = min(b, r0 + rule.q_offset + 1)
    if rule.window is not None:
        a = max(a, r1 - 1 + rule.q_offset - rule.window + 1)
    return (a, b) if a < b else (c0, c0)


def pooled_head(layer: object, head: int, th: int, tw: int, name: str = "weights") -> torch.Tensor:
    """One head's weights (or `name` "moved") average-pooled to at most th x tw, computed a band
    of rows at a time (never the whole n x n map at once). [<=th, <=tw] CPU float32"""
    n_q, n_k = layer.stored("q").shape[1], layer.stored("k").shape[1]
    th, tw = min(th, n_q), min(tw, n_k)
    out = torch.zeros(th, tw)
    # adaptive_avg_pool2d's bins: rows floor(i·n/th) .. ceil((i+1)·n/th), so both paths agree
    starts = [(i * n_q) // th for i in range(th)]
    ends = [-(-((i + 1) * n_q) // th) for i in range(th)]
    step = max(1, BLOCK_CELLS // (4 * n_k))  # input rows per band
    pool = torch.nn.functional.adaptive_avg_pool1d
    r = 0
    while r < th:
        r_end = r + 1  # a band of whole output rows r .. r_end-1
        while r_end < th and ends[r_end] - starts[r] <= step:
            r_end += 1
        lo, hi = starts[r], ends[r_end - 1]
        w = torch.zeros(hi - lo, n_k)  # [band, k]
        c0, c1 = key_range(layer.rule, lo, hi)  # a causal band: fewer keys
        w[:, c0:c1] = layer.block(name, head, slice(lo, hi), slice(c0, c1))  # moved: x norms
        w = pool(w.unsqueeze(0), tw).squeeze(0)  # [band, tw] exact column-bin means
        for i in range(r, r_end):
            out[i] = w[starts[i] - lo : ends[i] - lo].mean(0)
        r = r_end
    return out
