"""(The device capture recipe's mkmodel.py of 2026-12-07, unchanged but for this line; the whole recipe is in
docs/development.md, "The GPU suite".)
Make tiny random-weight models for the real sglang server (run on the device).

/root/tiny    : LlamaForCausalLM  hidden 256, 2 layers, 4 heads, 2 KV heads, inter 512
/root/tinymoe : Qwen3MoeForCausalLM hidden 256, 2 layers, 4 heads, 2 KV heads, 8 experts top-2
Tokenizer: byte-level BPE (vocab 4096) trained with `tokenizers` on local Python sources,
saved as PreTrainedTokenizerFast with a ChatML chat template.
Weights are written by hand with safetensors in the classic per-expert HF layout.
"""
import glob
import json
import os
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

V = 4096
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tokenizer(out):
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:200]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=V, special_tokens=SPECIAL, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, tr)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                   eos_token="<|im_end|>", pad_token="<|pad|>")
    fast.chat_template = CHAT
    fast.save_pretrained(out)
    return fast


def r(*shape):
    return (torch.randn(*shape) * 0.02).to(torch.bfloat16)


def ones(n):
    return torch.ones(n, dtype=torch.bfloat16)


def attn(sd, p, H, nh, nkv, hd, qk_norm=False):
    sd[p + "self_attn.q_proj.weight"] = r(nh * hd, H)
    sd[p + "self_attn.k_proj.weight"] = r(nkv * hd, H)
    sd[p + "self_attn.v_proj.weight"] = r(nkv * hd, H)
    sd[p + "self_attn.o_proj.weight"] = r(H, nh * hd)
    if qk_norm:
        sd[p + "self_attn.q_norm.weight"] = ones(hd)
        sd[p + "self_attn.k_norm.weight"] = ones(hd)
    sd[p + "input_layernorm.weight"] = ones(H)
    sd[p + "post_attention_layernorm.weight"] = ones(H)


def main():
    torch.manual_seed(0)
    H, L, NH, NKV, HD, FF = 256, 2, 4, 2, 64, 512
    for out, kind in (("/root/tiny", "llama"), ("/root/tinymoe", "qwen3moe")):
        os.makedirs(out, exist_ok=True)
        fast = make_tokenizer(out)
        bos, eos, pad = (fast.convert_tokens_to_ids(t) for t in ("<|begin_of_text|>", "<|im_end|>", "<|pad|>"))
        sd = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": ones(H), "lm_head.weight": r(V, H)}
        common = dict(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
                      num_key_value_heads=NKV, max_position_embeddings=4096, rms_norm_eps=1e-6,
                      rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos,
                      pad_token_id=pad, hidden_act="silu", torch_dtype="bfloat16", dtype="bfloat16",
                      attention_bias=False, initializer_range=0.02, use_cache=True)
        if kind == "llama":
            cfg = dict(common, architectures=["LlamaForCausalLM"], model_type="llama",
                       intermediate_size=FF, head_dim=HD, mlp_bias=False)
            for layer in range(L):
                p = f"model.layers.{layer}."
                attn(sd, p, H, NH, NKV, HD)
                sd[p + "mlp.gate_proj.weight"] = r(FF, H)
                sd[p + "mlp.up_proj.weight"] = r(FF, H)
                sd[p + "mlp.down_proj.weight"] = r(H, FF)
        else:
            E, K, MI = 8, 2, 128
            cfg = dict(common, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                       intermediate_size=FF, moe_intermediate_size=MI, head_dim=HD, num_experts=E,
                       num_experts_per_tok=K, decoder_sparse_step=1, mlp_only_layers=[],
                       norm_topk_prob=True, output_router_logits=False, router_aux_loss_coef=0.001,
                       sliding_window=None, use_sliding_window=False, max_window_layers=L)
            for layer in range(L):
                p = f"model.layers.{layer}."
                attn(sd, p, H, NH, NKV, HD, qk_norm=True)
                sd[p + "mlp.gate.weight"] = r(E, H)
                for e in range(E):
                    q = f"{p}mlp.experts.{e}."
                    sd[q + "gate_proj.weight"] = r(MI, H)
                    sd[q + "up_proj.weight"] = r(MI, H)
                    sd[q + "down_proj.weight"] = r(H, MI)
        save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(out, "config.json"), "w") as fh:
            json.dump(cfg, fh, indent=2)
        with open(os.path.join(out, "generation_config.json"), "w") as fh:
            json.dump({"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad, "do_sample": False}, fh,
                      indent=2)
        print(out, kind, "params", sum(v.numel() for v in sd.values()), "files", sorted(os.listdir(out)))
    # sanity: load config + tokenizer through transformers
    from transformers import AutoConfig, AutoTokenizer
    for out in ("/root/tiny", "/root/tinymoe"):
        c = AutoConfig.from_pretrained(out)
        t = AutoTokenizer.from_pretrained(out)
        ids = t.apply_chat_template([{"role": "user", "content": "def hello(): return 1"}],
                                    add_generation_prompt=True, tokenize=True)
        n = len(ids) if not isinstance(ids, dict) else ids.keys()
        print(out, type(c).__name__, type(t).__name__, "chat ids", n)


if __name__ == "__main__":
    sys.exit(main())
