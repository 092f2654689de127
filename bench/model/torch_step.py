#!/usr/bin/env python3
"""PyTorch's CPU training step on the same models as bench/model/model_train_step_bench.

Same model (--model gpt2: pre-LayerNorm GPT-2, learned positions, tied LM head, tanh-GELU;
--model llama: RMSNorm, RoPE (theta 1e4, rotate-half), grouped-query attention with heads / 2 KV
heads, SwiGLU FFN of 4 x width, untied LM head, no biases; both with causal attention scaled by
1/sqrt(head_dim), vocabulary 256), same step (zero_grad, forward, mean cross-entropy, backward,
clip_grad_norm_(1.0), AdamW(lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0) as ntp's
AdamWHyper defaults), same thread count. --dtype bf16 runs the forward under
torch.autocast("cpu", torch.bfloat16): matrix products read bf16 inputs, the weights (master copy)
and the optimizer stay float32, as `ntp train --dtype bf16`. Attention is
F.scaled_dot_product_attention where this PyTorch has it (2.x), else the explicit masked softmax
(PyTorch 1.13, Debian's python3-torch, has no fused attention).

  bench/model/torch_step.py --threads 1 --layers 2 --batch 4 --width 512 --heads 8 --context 256
      [--model gpt2|llama] [--dtype fp32|bf16]

Prints the best step time of --rounds after one warm-up step, every round's time, and the peak
resident memory of the process (and what it was right after importing torch).
"""
import argparse
import math
import os
import resource
import time


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = ap.parse_args()

    # torch.set_num_threads does not reach the OpenBLAS that Debian's PyTorch calls for matrix
    # products: without this its sgemm would use every core whatever --threads says.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    rss_after_import = peak_rss_mib()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    C, H, T, V, L = args.width, args.heads, args.context, args.vocab, args.layers

    fused = hasattr(F, "scaled_dot_product_attention")

    def attend(q, k, v, mask):  # [b, h, t, d] each, causal
        if fused:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril())

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(b, t, H, C // H).transpose(1, 2)
            k = k.view(b, t, H, C // H).transpose(1, 2)
            v = v.view(b, t, H, C // H).transpose(1, 2)
            y = attend(q, k, v, self.mask[:t, :t]).transpose(1, 2).contiguous().view(b, t, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight).float()  # tied LM head
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    D, KV = C // H, max(1, H // 2)

    class RmsNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    inv_freq = 1.0 / (1e4 ** (torch.arange(0, D, 2).float() / D))
    angles = torch.outer(torch.arange(T).float(), inv_freq)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rope(x):  # [b, h, t, d], rotate-half (Hugging Face Llama)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos[: x.shape[2]] + rotated * sin[: x.shape[2]]

    class LlamaBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RmsNorm()
            self.q_proj = nn.Linear(C, C, bias=False)
            self.k_proj = nn.Linear(C, KV * D, bias=False)
            self.v_proj = nn.Linear(C, KV * D, bias=False)
            self.o_proj = nn.Linear(C, C, bias=False)
            self.post_attention_layernorm = RmsNorm()
            self.gate_proj = nn.Linear(C, 4 * C, bias=False)
            self.up_proj = nn.Linear(C, 4 * C, bias=False)
            self.down_proj = nn.Linear(4 * C, C, bias=False)
            self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril())

        def forward(self, x):
            b, t, _ = x.shape
            h = self.input_layernorm(x)
            q = rope(self.q_proj(h).view(b, t, H, D).transpose(1, 2))
            k = rope(self.k_proj(h).view(b, t, KV, D).transpose(1, 2))
            v = self.v_proj(h).view(b, t, KV, D).transpose(1, 2)
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
            y = attend(q, k, v, self.mask[:t, :t]).transpose(1, 2).contiguous().view(b, t, C)
            x = x + self.o_proj(y)
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, C)
            self.layers = nn.ModuleList([LlamaBlock() for _ in range(L)])
            self.norm = RmsNorm()
            self.lm_head = nn.Linear(C, V, bias=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            x = self.embed_tokens(idx)
            for block in self.layers:
                x = block(x)
            logits = self.lm_head(self.norm(x)).float()
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    model = Gpt() if args.model == "gpt2" else Llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, V, (args.batch, T), generator=g)
    targets = torch.randint(0, V, (args.batch, T), generator=g)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step()  # warm-up: allocates gradients and optimizer state
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    params = sum(p.numel() for p in model.parameters())
    print(f"torch: {torch.__version__}, {args.model} {args.dtype}, attention "
          f"{'fused' if fused else 'explicit'}, {torch.get_num_threads()} threads, OpenBLAS threads "
          f"{os.environ['OPENBLAS_NUM_THREADS']}, "
          f"{params} params, best of {args.rounds} rounds")
    print("torch rounds ms: " + " ".join(f"{t * 1e3:.1f}" for t in times))
    print(f"torch step: {min(times) * 1e3:.1f} ms")
    print(f"torch peak resident memory: {peak_rss_mib():.1f} MiB "
          f"({rss_after_import:.1f} MiB after import torch)")


if __name__ == "__main__":
    main()
