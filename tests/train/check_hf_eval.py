#!/usr/bin/env python3
"""`ntp eval` on a Hugging Face export against an independent computation of the same loss.

  check_hf_eval.py --ntp NTP --work DIR

Trains a small Llama (4 query heads, 2 KV heads), a small MoE (4 experts, top 2, exported as
MixtralForCausalLM), the same MoE with a shared expert (exported as Qwen2MoeForCausalLM) and a
small GPT-2 in one process each,
consolidates each checkpoint (`ntp ckpt consolidate`) and evaluates the export with `ntp eval`.
The same mean loss over the same windows is then computed
  - in float64 NumPy, straight from transformers' definitions of LlamaForCausalLM (RMSNorm,
    rotate_half RoPE, repeat_kv grouped-query attention, SwiGLU, untied head),
    MixtralForCausalLM (MixtralSparseMoeBlock and load_balancing_loss_func, the loss with
    output_router_logits: cross-entropy + router_aux_loss_coef x aux per forward),
    Qwen2MoeForCausalLM (Qwen2MoeSparseMoeBlock: q/k/v biases, the shared expert gated by a
    sigmoid, read as stored, so the export's zeros and doubled down_proj are checked too) and
    GPT2LMHeadModel (Conv1D [in, out], tanh GELU, tied head), reading model.safetensors with the
    `safetensors` package: always;
  - with transformers itself (from_pretrained, float32), when torch and transformers are
    installed; otherwise that part prints SKIP and the NumPy check still decides.
Training runs 60 steps at lr 1e-2 (held-out loss ~1.8 nats), so that attention, and with it
the RoPE layout, matters: an interleaved RoPE in the NumPy model moves its loss by 2e-3.
ntp computes in float32 and NumPy in float64: float32 rounding of each logit is ~6e-8 relative
and mostly averages out over the 512 targets; runs show 7.5e-9 (Llama), 6.1e-9 (MoE) and 4.3e-9
(GPT-2), so the limit is 1e-7. transformers also computes in float32, in another order: 1e-6
(runs with PyPI's torch 2.15 and transformers 5.25 in a venv of their own, not in CI: 4.0e-9
Llama, 9.9e-9 MoE, 3.0e-9 GPT-2; 2026-12-05, AMD EPYC: 2.8e-9 Llama, 2.1e-10 MoE, 2.4e-9 MoE with
a shared expert loaded as Qwen2MoeForCausalLM, 8.9e-9 GPT-2).

Needs numpy and safetensors (PyPI); without them the test is skipped (exit 77) unless CI=true.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from python_deps import missing_numpy_safetensors  # noqa: E402

CONTEXT, WINDOWS, OFFSET, BATCH = 16, 32, 3, 4
LIMIT = 1e-7  # NumPy float64 against ntp float32
LIMIT_TRANSFORMERS = 1e-6  # two float32 computations


def write_tokens(path, n=6000):
    text = b"the quick brown fox jumps over the lazy dog; "
    seed = 3
    tokens = []
    for i in range(n):
        seed = (seed * 1103515245 + 12345) % (1 << 31)
        tokens.append(seed % 256 if seed % 10 == 0 else text[i % len(text)])
    header = [20240520, 1, n] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{n}H", *tokens))
    return tokens


def windows(tokens):
    inputs, targets = [], []
    for w in range(WINDOWS):
        start = OFFSET + w * CONTEXT
        inputs.append(tokens[start:start + CONTEXT])
        targets.append(tokens[start + 1:start + CONTEXT + 1])
    return inputs, targets


def mean_nll(np, logits, targets):
    m = logits.max(-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    t = np.array(targets)
    return float(-np.take_along_axis(logp, t[..., None], -1).mean())


def llama_logits(np, w, c, ids, router_logits=None):
    """LlamaForCausalLM's logits; MixtralForCausalLM's (its MoE block for the MLP) when
    router_logits is a list, which then receives each layer's router logits."""
    d = c["head_dim"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    eps = c["rms_norm_eps"]
    x = w["model.embed_tokens.weight"][ids]
    t = ids.shape[1]
    inv_freq = 1.0 / (c["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d))
    freqs = np.outer(np.arange(t, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * g

    def rotate_half(v):
        return np.concatenate([-v[..., d // 2:], v[..., :d // 2]], -1)

    mask = np.triu(np.full((t, t), -np.inf), 1)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, w[p + "input_layernorm.weight"])

        def proj(name, heads):  # Qwen2-MoE's q/k/v carry a bias (qkv_bias)
            y = h @ w[p + f"self_attn.{name}.weight"].T
            if p + f"self_attn.{name}.bias" in w:
                y = y + w[p + f"self_attn.{name}.bias"]
            return y.reshape(-1, t, heads, d).transpose(0, 2, 1, 3)

        q, k, v = proj("q_proj", nh), proj("k_proj", nkv), proj("v_proj", nkv)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, nh // nkv, axis=1)  # repeat_kv
        v = np.repeat(v, nh // nkv, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(0, 2, 1, 3).reshape(-1, t, nh * d)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        if router_logits is not None:
            moe = qwen2_moe if c["model_type"] == "qwen2_moe" else mixtral_moe
            x = x + moe(np, w, c, p, h, router_logits)
            continue
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    return x @ w["lm_head.weight"].T


def route(np, flat, gate, k, normalize, router_logits):
    """transformers' MoE routers: softmax over all experts, top-k (ties to the lower id), the top-k
    weights renormalized when `normalize`. Appends the logits; returns the top-k ids and weights."""
    logits = flat @ gate.T
    router_logits.append(logits)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    weights = np.take_along_axis(probs, top, -1)
    if normalize:
        weights /= weights.sum(-1, keepdims=True)
    return top, weights


def swiglu(np, x, gate, up, down):
    g, u = x @ gate.T, x @ up.T
    return (g / (1.0 + np.exp(-g)) * u) @ down.T


def routed_experts(np, flat, top, weights, n_exp, expert):
    """Sum over each token's top-k experts of weight x expert(x); expert(e, rows) runs one."""
    out = np.zeros_like(flat)
    for e in range(n_exp):
        rows, slot = np.nonzero(top == e)
        if rows.size:
            out[rows] += weights[rows, slot][:, None] * expert(e, flat[rows])
    return out


def mixtral_moe(np, w, c, p, h, router_logits):
    """transformers' MixtralSparseMoeBlock: the router (block_sparse_moe.gate), top-k always
    renormalized, SwiGLU experts (w1 gate, w3 up, w2 down). Appends the router logits."""
    n_exp, k = c["num_local_experts"], c["num_experts_per_tok"]
    flat = h.reshape(-1, h.shape[-1])
    top, weights = route(np, flat, w[p + "block_sparse_moe.gate.weight"], k, True, router_logits)

    def expert(e, x):
        q = f"{p}block_sparse_moe.experts.{e}."
        return swiglu(np, x, w[q + "w1.weight"], w[q + "w3.weight"], w[q + "w2.weight"])

    return routed_experts(np, flat, top, weights, n_exp, expert).reshape(h.shape)


def qwen2_moe(np, w, c, p, h, router_logits):
    """transformers' Qwen2MoeSparseMoeBlock: the router (mlp.gate), top-k renormalized when
    norm_topk_prob, SwiGLU experts (gate_proj, up_proj, down_proj), plus the shared expert scaled
    by sigmoid(shared_expert_gate(x)). Appends the router logits."""
    n_exp, k = c["num_experts"], c["num_experts_per_tok"]
    flat = h.reshape(-1, h.shape[-1])
    top, weights = route(np, flat, w[p + "mlp.gate.weight"], k, c["norm_topk_prob"],
                         router_logits)

    def mlp(q, x):
        return swiglu(np, x, w[q + "gate_proj.weight"], w[q + "up_proj.weight"],
                      w[q + "down_proj.weight"])

    out = routed_experts(np, flat, top, weights, n_exp, lambda e, x: mlp(f"{p}mlp.experts.{e}.", x))
    gate = 1.0 / (1.0 + np.exp(-(flat @ w[p + "mlp.shared_expert_gate.weight"].T)))
    out += gate * mlp(p + "mlp.shared_expert.", flat)
    return out.reshape(h.shape)


def load_balancing_loss(np, router_logits, n_exp, k):
    """transformers' load_balancing_loss_func without an attention mask: the layers' router logits
    concatenated, E * sum over experts of (tokens whose top-k holds it / tokens) * mean prob."""
    logits = np.concatenate(router_logits, 0)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    counts = np.stack([(top == e).any(-1) for e in range(n_exp)], -1).mean(0)
    return float(n_exp * (counts * probs.mean(0)).sum())


def gpt2_logits(np, w, c, ids):
    nh, e = c["n_head"], c["n_embd"]
    d = e // nh
    t = ids.shape[1]

    def ln(v, g, b):
        mu = v.mean(-1, keepdims=True)
        var = ((v - mu) ** 2).mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + c["layer_norm_epsilon"]) * g + b

    def gelu_new(v):
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))

    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:t]
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for layer in range(c["n_layer"]):
        p = f"transformer.h.{layer}."
        h = ln(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (a.reshape(-1, t, nh, d).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, -1))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(0, 2, 1, 3).reshape(-1, t, e)
        x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = ln(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        f = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + f @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = ln(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
    return x @ w["transformer.wte.weight"].T


def reference_loss(np, weights, config, name, inputs, targets):
    """The mean loss `ntp eval` reports, in float64. For a MoE, as ntp's (and
    MixtralForCausalLM's or Qwen2MoeForCausalLM's with output_router_logits) loss: per forward of
    BATCH windows, the mean cross-entropy plus router_aux_loss_coef times that forward's
    load-balancing loss; the batches weighted by their targets (all the same size here)."""
    if name == "gpt2":
        return mean_nll(np, gpt2_logits(np, weights, config, np.array(inputs)), targets)
    if name == "llama":
        return mean_nll(np, llama_logits(np, weights, config, np.array(inputs)), targets)
    total = 0.0
    for b in range(0, len(inputs), BATCH):
        router_logits = []
        logits = llama_logits(np, weights, config, np.array(inputs[b:b + BATCH]), router_logits)
        n_exp = config.get("num_local_experts", config.get("num_experts"))
        aux = load_balancing_loss(np, router_logits, n_exp, config["num_experts_per_tok"])
        loss = mean_nll(np, logits, targets[b:b + BATCH]) + config["router_aux_loss_coef"] * aux
        total += loss * len(inputs[b:b + BATCH])
    return total / len(inputs)


def transformers_loss(hf_dir, inputs, targets):
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"SKIP transformers cross-check: missing Python package ({e.name}); "
              "install with: pip install torch transformers")
        return None
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    model.eval()
    total = 0.0
    moe = model.config.model_type in ("mixtral", "qwen2_moe")
    for b in range(0, len(inputs), BATCH):
        batch = torch.tensor(inputs[b:b + BATCH])
        with torch.no_grad():
            out = model(batch, output_router_logits=True) if moe else model(batch)
        logits = out.logits.double()
        loss = float(torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), torch.tensor(targets[b:b + BATCH]).reshape(-1)))
        if moe:
            loss += model.config.router_aux_loss_coef * float(out.aux_loss)
        total += loss * len(batch)
    return total / len(inputs)


def check_family(args, np, load_file, tokens, name, model_flags):
    inputs, targets = windows(tokens)
    data = os.path.join(args.work, "tokens.bin")
    save, hf = os.path.join(args.work, name + "-ckpt"), os.path.join(args.work, name + "-hf")
    subprocess.run([args.ntp, "train", *model_flags, "--steps", "60", "--lr", "1e-2", "--no-live-recovery",
                    "--train-data", data, "--val-data", data, "--save-dir", save,
                    "--out", os.path.join(args.work, name + "-out"), "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([args.ntp, "ckpt", "consolidate", save, "--out", hf], check=True,
                   stdout=subprocess.DEVNULL)
    out = subprocess.run([args.ntp, "eval", hf, "--data", data, "--context", str(CONTEXT),
                          "--batch", str(BATCH), "--windows", str(WINDOWS), "--offset",
                          str(OFFSET)], check=True, capture_output=True, text=True).stdout
    ntp_loss = json.loads(out)["loss"]
    with open(os.path.join(hf, "config.json")) as f:
        config = json.load(f)
    stored = load_file(os.path.join(hf, "model.safetensors"))
    weights = {k: v.astype(np.float64) for k, v in stored.items()}
    ref = reference_loss(np, weights, config, name, inputs, targets)
    failures = []
    rel = abs(ntp_loss - ref) / abs(ref)
    print(f"{name}: ntp eval {ntp_loss:.10f}, NumPy float64 {ref:.10f}: relative {rel:.2e}")
    if not rel <= LIMIT:
        failures.append(f"{name}: ntp eval differs from NumPy by {rel:.2e} > {LIMIT}")
    tf = transformers_loss(hf, inputs, targets)
    if tf is not None:
        rel_tf = abs(ntp_loss - tf) / abs(tf)
        print(f"{name}: transformers {tf:.10f}: relative {rel_tf:.2e}")
        if not rel_tf <= LIMIT_TRANSFORMERS:
            failures.append(f"{name}: ntp eval differs from transformers by {rel_tf:.2e} > "
                            f"{LIMIT_TRANSFORMERS}")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ntp", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    missing = missing_numpy_safetensors()
    if missing is not None:
        return missing
    import numpy as np
    from safetensors.numpy import load_file
    tokens = write_tokens(os.path.join(args.work, "tokens.bin"))
    failures = []
    failures += check_family(args, np, load_file, tokens, "llama",
                             ["--model", "llama", "--layers", "2", "--heads", "4", "--kv-heads",
                              "2", "--width", "32", "--context", "16", "--ffn-unit", "4",
                              "--rope-theta", "500000"])
    failures += check_family(args, np, load_file, tokens, "moe",
                             ["--model", "moe", "--layers", "2", "--heads", "4", "--kv-heads",
                              "2", "--width", "32", "--context", "16", "--ffn-unit", "4",
                              "--ffn", "32", "--experts", "4", "--top-k", "2",
                              "--router-aux-coef", "0.02"])
    failures += check_family(args, np, load_file, tokens, "moe-shared",
                             ["--model", "moe", "--layers", "2", "--heads", "4", "--kv-heads",
                              "2", "--width", "32", "--context", "16", "--ffn-unit", "4",
                              "--ffn", "32", "--experts", "4", "--top-k", "2",
                              "--shared-experts", "1", "--router-aux-coef", "0.02"])
    failures += check_family(args, np, load_file, tokens, "gpt2",
                             ["--layers", "2", "--heads", "4", "--width", "32", "--context", "16",
                              "--ffn-unit", "4"])
    for f in failures:
        print("FAIL:", f)
    if not failures:
        shutil.rmtree(args.work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
