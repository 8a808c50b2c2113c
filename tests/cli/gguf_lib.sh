# shellcheck shell=sh
# Small GGUF files written from the shell field by field (little-endian; docs/gguf.md):
# { ghead N_KV; kv_str KEY VALUE; kv_u32 KEY N; ... } >FILE, metadata only, or with one tensor:
# { ghead N_KV 1; kv_...; tinfo NAME N; } >FILE; tdata FILE N.
# le V N: V as N little-endian bytes.
le() {
  v=$1 i=0
  while [ "$i" -lt "$2" ]; do
    printf "\\$(printf '%03o' $((v % 256)))"
    v=$((v / 256)) i=$((i + 1))
  done
}
gstr() { le ${#1} 8; printf '%s' "$1"; }
kv_str() { gstr "$1"; le 8 4; gstr "$2"; }
kv_u32() { gstr "$1"; le 4 4; le "$2" 4; }
kv_u64() { gstr "$1"; le 10 4; le "$2" 8; }
# kv_f32 KEY BITS: an f32 given by its bit pattern as an integer (1.25: 1067450368).
kv_f32() { gstr "$1"; le 6 4; le "$2" 4; }
# kv_bools KEY B...: an array of bools (0 or 1).
kv_bools() { gstr "$1"; shift; le 9 4; le 7 4; le $# 8; for b in "$@"; do le "$b" 1; done; }
# ghead N_KV [N_TENSORS]: the header.
ghead() { printf 'GGUF'; le 3 4; le "${2:-0}" 8; le "$1" 8; }
# tinfo NAME N: the info of an f32 tensor of N elements at offset 0 (one tensor a file).
tinfo() { gstr "$1"; le 1 4; le "$2" 8; le 0 4; le 0 8; }
# tdata FILE N: pads FILE to the 32-byte alignment, then N zero floats.
tdata() { head -c $(((32 - $(wc -c <"$1") % 32) % 32 + 4 * $2)) /dev/zero >>"$1"; }
