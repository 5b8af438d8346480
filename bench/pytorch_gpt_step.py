#!/usr/bin/env python3
"""One training step of the GPT traintwin trains, in PyTorch: the reference of
bench/cpu_speed_vs_pytorch.sh (fp32 on the CPU) and of scripts/device_check.sh (on a GPU: fp32
or bf16 autocast, eager or torch.compile, manual or scaled_dot_product_attention).

The model is the one `traintwin train` builds for a `model.architecture: gpt` scenario
(GPT-2 / Megatron-LM GPT, as llm.c's gpt2_forward): learned position embedding, pre-LayerNorm
blocks (LN, fused QKV with bias, causal softmax attention scaled by 1/sqrt(head dim), output
projection, residual; LN, FC1 4h, GELU tanh approximation, FC2, residual), a final LayerNorm and
the LM head tied to the word embedding, whose rows are the vocabulary padded to a multiple of
128 as Megatron pads it (50,257 -> 50,304). No dropout (the benchmark scenarios set it to 0).

One step = global_batch / micro_batch micro-batches of forward + backward with gradient
accumulation, the gradient norm clipped to 1.0, and AdamW (torch.optim.AdamW, its default
single-tensor implementation), as traintwin's iteration. Tokens are random ids (the speed of a
step does not depend on them). Prints one line per timed step and a summary line:

  step 3 ms 812.4 tokens_per_s 1260.5
  pytorch tokens_per_s median 1255.0 ...

Usage: pytorch_gpt_step.py --layers 4 --hidden 128 --heads 4 --seq 128 --micro-batch 4
           --global-batch 16 [--vocab 50257] [--threads 1] [--warmup 2] [--steps 5]
           [--device cpu|cuda] [--dtype fp32|bf16] [--compile] [--sdpa]
On cuda, fp32 means true fp32 GEMMs (TF32 off, as traintwin's fp32 backend) and bf16 means
torch.autocast(bfloat16) with fp32 weights (Megatron's mixed precision); steps are timed with a
torch.cuda.synchronize() at both ends.
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, hidden, heads, seq, sdpa=False):
        super().__init__()
        self.heads = heads
        self.sdpa = sdpa
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def attention(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).split(h, dim=2)
        q = q.view(b, s, self.heads, d).transpose(1, 2)  # [b, heads, s, d]
        k = k.view(b, s, self.heads, d).transpose(1, 2)
        v = v.view(b, s, self.heads, d).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).contiguous().view(b, s, h))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))  # [b, heads, s, s]
        scores = scores.masked_fill(self.mask[:s, :s], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v  # [b, heads, s, d]
        return self.proj(y.transpose(1, 2).contiguous().view(b, s, h))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, hidden, heads, seq, padded_vocab, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(padded_vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, seq, sdpa) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        for p in self.parameters():  # Megatron's init_method_normal(0.02) for every matrix
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, labels):
        s = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(s, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head, [b, s, padded vocab]
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention")
    a = ap.parse_args()
    if a.global_batch % a.micro_batch:
        sys.exit(f"pytorch_gpt_step: --global-batch {a.global_batch} is not a multiple of "
                 f"--micro-batch {a.micro_batch}")
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    padded_vocab = (a.vocab + 127) // 128 * 128  # Megatron's padding at TP 1
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = Gpt(a.layers, a.hidden, a.heads, a.seq, padded_vocab, a.sdpa).to(dev)
    step_model = torch.compile(model) if a.compile else model
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.1)
    micro_batches = a.global_batch // a.micro_batch
    tokens_per_step = a.global_batch * a.seq
    rates = []
    for step in range(1, a.warmup + a.steps + 1):
        data = [(torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev),
                 torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev))
                for _ in range(micro_batches)]
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for tokens, labels in data:
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
                loss = step_model(tokens, labels)
            (loss / micro_batches).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        rate = tokens_per_step / (ms / 1e3)
        if step > a.warmup:
            rates.append(rate)
        print(f"step {step} ms {ms:.1f} tokens_per_s {rate:.1f}"
              + (" (warm-up)" if step <= a.warmup else ""), flush=True)
    print(f"pytorch {torch.__version__} {a.device} {a.dtype} compile {a.compile} sdpa {a.sdpa} "
          f"threads {torch.get_num_threads()} tokens_per_s median "
          f"{statistics.median(rates):.1f} max {max(rates):.1f}", flush=True)


if __name__ == "__main__":
    main()
