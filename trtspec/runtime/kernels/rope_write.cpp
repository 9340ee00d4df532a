// A layer's new rows before attention, in one call: rotary embedding of the queries and keys
// (Llama's rotate-half form) and the keys and values written into their paged-cache slots.
//
// Why (docs/BENCHMARKS-log.md, "Fewer, larger calls"): in torch this is ~14 small operations a layer
// (two rotations of six each, two index copies, the transposes between them), ~1.1 ms of a
// one-sequence decode step of SmolLM2 and ~1.7 ms at eight sequences on a 2-core AVX-512 AMD EPYC,
// nearly all of it per-call cost.
//
// The same numbers as torch's: each element is x * cos + (+/- its rotation partner) * sin with
// every product and the sum rounded on its own (built with -ffp-contract=off, so no multiply-add
// fuses them), which is what torch's `(x * cos) + (rotate_half(x) * sin)` computes, elementwise;
// negation and copies are exact. So the lean Llama forward stays bit for bit transformers'
// (tests/runtime/forward/test_rt_llama_forward.py), and every row is computed alone (batch-invariant).
//
// Built with rowdot.cpp and paged_attend.cpp by trtspec/runtime/kernels/native.py.
#include <stdint.h>

namespace {

// out[e] = x[e] * cos[e] + rotated[e] * sin[e] for one head of d elements (d even), where
// rotated = (-x[d/2:], x[:d/2]).
inline void rotate(const float* x, const float* cos, const float* sin, int64_t d, float* out, int64_t step) {
  const int64_t half = d / 2;
  for (int64_t e = 0; e < half; ++e) out[e * step] = x[e] * cos[e] + (-x[e + half]) * sin[e];
  for (int64_t e = half; e < d; ++e) out[e * step] = x[e] * cos[e] + x[e - half] * sin[e];
}

}  // namespace

// query: rows of heads * d floats, `query_row` floats apart (likewise key and value with kv_heads);
// cos, sin: [rows, d]; slots: [rows]; keys: [kv_heads, d, key_row] (a layer's pool keys,
// transposed); values: [kv_heads, num_slots, d]; query_out: [rows, heads, d].
extern "C" void rope_write(const float* query, int64_t query_row, const float* key, int64_t key_row_in,
                           const float* value, int64_t value_row, int64_t rows, int64_t heads, int64_t kv_heads,
                           int64_t d, const float* cos, const float* sin, const int64_t* slots, float* keys,
                           int64_t key_row, float* values, int64_t num_slots, float* query_out) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* c = cos + t * d;
    const float* s = sin + t * d;
    for (int64_t h = 0; h < heads; ++h)
      rotate(query + t * query_row + h * d, c, s, d, query_out + (t * heads + h) * d, 1);
    const int64_t slot = slots[t];
    for (int64_t g = 0; g < kv_heads; ++g) {
      rotate(key + t * key_row_in + g * d, c, s, d, keys + g * d * key_row + slot, key_row);
      const float* v = value + t * value_row + g * d;
      float* to = values + (g * num_slots + slot) * d;
      for (int64_t e = 0; e < d; ++e) to[e] = v[e];
    }
  }
}
