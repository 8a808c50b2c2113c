# GPT-2 decode latency in PyTorch, the baseline gplan's GPU benchmark is compared with, in the same run.
# A minimal fp16 GPT-2 with a static KV cache, timed eager and as a replayed CUDA graph (the graph
# attends over the whole cache with a mask, so one capture serves every position), plus Hugging Face
# GPT2LMHeadModel.generate as users run it. Random weights; timings only.
# usage: python3 torch_gpt2.py N_LAYER N_EMBD N_HEAD [--no-hf]   e.g. 12 768 12 (117M), 48 1600 25 (1558M)
# Prints ms per generated token after a 32-token prompt, 128 tokens, and (gplan's copy, bench/) the
# time of one 512-token prompt (causal attention, eager), so bench/gpu.sh compares prompts too;
# --no-hf skips the slow transformers.generate timing.
import sys, time, torch, torch.nn.functional as F
torch.manual_seed(0)
dev = "cuda"; dt = torch.float16
L, D, H = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]); V, C = 50257, 1024; hd = D // H
P, N = 32, 128   # prompt length, generated tokens
def r(*s): return (torch.randn(*s, device=dev) * 0.02).to(dt)
W = dict(wte=r(V, D), wpe=r(C, D), lnf_g=torch.ones(D, device=dev, dtype=dt), lnf_b=torch.zeros(D, device=dev, dtype=dt))
layers = [dict(ln1_g=torch.ones(D, device=dev, dtype=dt), ln1_b=torch.zeros(D, device=dev, dtype=dt),
               ln2_g=torch.ones(D, device=dev, dtype=dt), ln2_b=torch.zeros(D, device=dev, dtype=dt),
               qkv_w=r(3*D, D), qkv_b=r(3*D), o_w=r(D, D), o_b=r(D), fc_w=r(4*D, D), fc_b=r(4*D), pr_w=r(D, 4*D), pr_b=r(D))
          for _ in range(L)]
K = torch.zeros(L, 1, H, C, hd, device=dev, dtype=dt); Vc = torch.zeros_like(K)
def step(tok, pos, full):
    # tok: [1] int64, pos: [1] int64 (device tensors)
    x = W["wte"][tok] + W["wpe"][pos]                       # [1, D]
    for i, l in enumerate(layers):
        h = F.layer_norm(x, (D,), l["ln1_g"], l["ln1_b"])
        q, k, v = F.linear(h, l["qkv_w"], l["qkv_b"]).view(1, 3, H, hd).unbind(1)
        K[i].index_copy_(2, pos, k.unsqueeze(2)); Vc[i].index_copy_(2, pos, v.unsqueeze(2))
        if full:   # fixed shape for graph capture: attend over the whole cache with a mask
            mask = torch.arange(C, device=dev) <= pos
            a = F.scaled_dot_product_attention(q.unsqueeze(2), K[i], Vc[i], attn_mask=mask.view(1, 1, 1, C))
        else:
            p = int(pos.item()) + 1
            a = F.scaled_dot_product_attention(q.unsqueeze(2), K[i][:, :, :p], Vc[i][:, :, :p])
        x = x + F.linear(a.reshape(1, D), l["o_w"], l["o_b"])
        h = F.layer_norm(x, (D,), l["ln2_g"], l["ln2_b"])
        x = x + F.linear(F.gelu(F.linear(h, l["fc_w"], l["fc_b"]), approximate="tanh"), l["pr_w"], l["pr_b"])
    x = F.layer_norm(x, (D,), W["lnf_g"], W["lnf_b"])
    return F.linear(x, W["wte"])                             # [1, V] logits
tok = torch.zeros(1, dtype=torch.long, device=dev); pos = torch.zeros(1, dtype=torch.long, device=dev)
def run(fn):
    for p in range(P + N):
        pos.fill_(p); logits = fn(); tok.copy_(logits.argmax(-1))
        if p == P - 1: torch.cuda.synchronize(); t0 = time.perf_counter()
    torch.cuda.synchronize(); return (time.perf_counter() - t0) / N * 1e3
with torch.no_grad():
    run(lambda: step(tok, pos, False)); e = run(lambda: step(tok, pos, False))
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): out = step(tok, pos, True)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): out = step(tok, pos, True)
    def replay(): g.replay(); return out
    run(replay); cg = run(replay)
    # One 512-token prompt, eager (fills the cache; the median of 5 after a warm-up).
    def prefill(T=512):
        tk = torch.randint(0, V, (T,), device=dev); ps = torch.arange(T, device=dev)
        x = W["wte"][tk] + W["wpe"][ps]
        for i, l in enumerate(layers):
            h = F.layer_norm(x, (D,), l["ln1_g"], l["ln1_b"])
            q, k, v = F.linear(h, l["qkv_w"], l["qkv_b"]).view(T, 3, H, hd).unbind(1)
            K[i][0, :, :T] = k.transpose(0, 1); Vc[i][0, :, :T] = v.transpose(0, 1)
            a = F.scaled_dot_product_attention(q.transpose(0, 1), K[i][0, :, :T], Vc[i][0, :, :T], is_causal=True)
            x = x + F.linear(a.transpose(0, 1).reshape(T, D), l["o_w"], l["o_b"])
            h = F.layer_norm(x, (D,), l["ln2_g"], l["ln2_b"])
            x = x + F.linear(F.gelu(F.linear(h, l["fc_w"], l["fc_b"]), approximate="tanh"), l["pr_w"], l["pr_b"])
        return F.linear(F.layer_norm(x, (D,), W["lnf_g"], W["lnf_b"]), W["wte"])
    ts = []
    for _ in range(6):
        torch.cuda.synchronize(); t0 = time.perf_counter(); prefill(); torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    pf = sorted(ts[1:])[2] * 1e3
wbytes = sum(t.numel() for l in layers for t in l.values()) * 2 + W["wte"].numel() * 2
print(f"torch L={L} D={D}: eager {e:.3f} ms/token, cuda-graph {cg:.3f} ms/token, prompt512 {pf:.3f} ms, weights {wbytes/1e9:.3f} GB")
if "--no-hf" in sys.argv: sys.exit(0)
try:
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(n_layer=L, n_embd=D, n_head=H)).to(dev, dt).eval()
    ids = torch.randint(0, V, (1, P), device=dev)
    with torch.no_grad():
        m.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize(); t0 = time.perf_counter()
        m.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize(); hf = (time.perf_counter() - t0) / N * 1e3
    print(f"hf-generate L={L} D={D}: {hf:.3f} ms/token (prompt {P} included)")
except Exception as ex:
    print("hf-generate failed:", repr(ex)[:300])
