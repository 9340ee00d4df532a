// The row kernel (rowdot.cpp) on bfloat16 weights and inputs, for CPUs with AVX512_BF16:
// y[r, n] = sum over k of bf16(x[r, k]) * bf16(w[n, k]) in float32, (+ bias[n]).
//
// Why (docs/BENCHMARKS-log.md, "bfloat16 linear layers on the cpu engine"): in float32 a decode step of up to
// 8 rows is bound by reading the weights (SmolLM2: 538 MB a step at ~31 GB/s on a 2-core AMD EPYC)
// and every 8 rows beyond by float32 multiply-adds at the cores' peak. bfloat16 weights are half the
// bytes, and VDPBF16PS multiplies twice as many pairs per instruction as a float32 FMA.
//
// What it computes: each input row is rounded to bfloat16 once a call (round to nearest even, as
// torch's .to(torch.bfloat16)); the weights were rounded at pack time. Products of two bfloat16
// values are exact in float32; VDPBF16PS adds the two products of a pair into a lane's float32 sum
// (denormal inputs and results flushed to zero, as the instruction always does).
//
// Batch-invariant by construction, as rowdot.cpp: an output's sum runs over k in one order (eight
// lanes, lane i taking the pairs at k = 16 s + 2 i, 2 i + 1 of every step s, then a fixed
// horizontal sum, the scalar tail in k order and the bias), whichever rows share the call, however
// they are chunked and however many threads split the groups (a thread owns whole outputs).
//
// The packed layout and the walk over it are rowdot_rows.h's (shared with rowdot.cpp).
//
// Built by trtspec/runtime/kernels/native.py, with -mavx512bf16 where the CPU has it; elsewhere only
// rowdot_bf16_available is built (it answers 0).
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#ifdef __AVX512BF16__

#include <vector>

#include "rowdot_rows.h"

namespace {

inline float widen_bf16(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  memcpy(&out, &bits, sizeof out);
  return out;
}

// float32 -> bfloat16, round to nearest even (NaN stays a quiet NaN), as torch rounds.
inline uint16_t narrow(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

struct Bf16Kernel {
  using Value = uint16_t;   // bfloat16 bits
  using Vector = __m256bh;
  static constexpr int STEP = 16;  // bfloat16 values of one row a VDPBF16PS reads
  static constexpr int ROWS = 8;   // input rows a pass: 24 sums + 3 weights + 1 input of 32 registers
  static Vector load(const uint16_t* values) {
    return (__m256bh)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(values));
  }
  static __m256 madd(__m256 sums, Vector weights, Vector inputs) { return _mm256_dpbf16_ps(sums, weights, inputs); }
  static float widen(uint16_t value) { return widen_bf16(value); }
};

}  // namespace

extern "C" int rowdot_bf16_available() { return 1; }

// w: [n_size, k_size] contiguous bfloat16 (torch's .to(torch.bfloat16) of the float32 weight) ->
// packed: ceil(n_size / GROUP) * GROUP * k_size values.
extern "C" void rowdot_bf16_pack(const uint16_t* w, int64_t n_size, int64_t k_size, uint16_t* packed) {
  rowdot_rows::pack<uint16_t, Bf16Kernel::STEP>(w, n_size, k_size, packed);
}

// x: [rows, k_size] float32 (rounded to bfloat16 here, once a call), packed: rowdot_bf16_pack's
// layout of [n_size, k_size], bias: [n_size] float32 or null, y: [rows, n_size] float32; all contiguous.
extern "C" void rowdot_bf16_linear(const float* x, int64_t rows, int64_t k_size, const uint16_t* packed,
                                   int64_t n_size, const float* bias, float* y, int threads) {
  std::vector<uint16_t> rounded(static_cast<size_t>(rows * k_size));
  for (int64_t i = 0; i < rows * k_size; ++i) rounded[i] = narrow(x[i]);
  rowdot_rows::linear<Bf16Kernel>(rounded.data(), rows, k_size, packed, n_size, bias, y, threads);
}

#else

extern "C" int rowdot_bf16_available() { return 0; }

#endif
