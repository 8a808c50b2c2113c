"""What the scripts that build a GGUF file with gguf-py's GGUFWriter share
(scripts/parity/make_gguf.py, scripts/bench/make_random_gguf.py, bench/make_gpt2_gguf.py): they
import it by path (sys.path), so each runs as before from any working directory."""


def add_vocab(w, v):
    """Copies the tokenizer of GGUFReader v (a vocabulary file) into GGUFWriter w: its model and
    tokens, and the scores, token types and merges it has. Returns the number of tokens."""
    f = v.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
    w.add_tokenizer_model(v.fields["tokenizer.ggml.model"].contents())
    w.add_token_list(tokens)
    if "tokenizer.ggml.scores" in v.fields:
        w.add_token_scores([float(x) for x in v.fields["tokenizer.ggml.scores"].contents()])
    if "tokenizer.ggml.token_type" in v.fields:
        w.add_token_types([int(x) for x in v.fields["tokenizer.ggml.token_type"].contents()])
    if "tokenizer.ggml.merges" in v.fields:
        w.add_token_merges(v.fields["tokenizer.ggml.merges"].contents())
    return len(tokens)


def write_gguf(w):
    """Writes GGUFWriter w's header, metadata and tensors to its file, then closes it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
