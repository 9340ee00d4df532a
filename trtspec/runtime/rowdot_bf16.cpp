// The row kernel (rowdot.cpp) on bfloat16 weights and inputs, for CPUs with AVX512_BF16:
// y[r, n] = sum over k of bf16(x[r, k]) * bf16(w[n, k]) in float32, (+ bias[n]).
//
// Why (docs/BENCHMARKS.md, "bfloat16 linear layers on the cpu engine"): in float32 a decode step of up to
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
// Built by trtspec/runtime/native.py, with -mavx512bf16 where the CPU has it; elsewhere only
// rowdot_bf16_available is built (it answers 0).
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#ifdef __AVX512BF16__

#include <vector>

#include "rowdot_rows.h"

namespace {

using rowdot_rows::GROUP;
constexpr int64_t AHEAD = 4096;  // bfloat16 values prefetched ahead in the weight stream (8 KB)

inline float widen(uint16_t value) {
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
  using Value = uint16_t;          // bfloat16 bits
  static constexpr int STEP = 16;  // bfloat16 values of one row a VDPBF16PS reads
  static constexpr int ROWS = 8;   // input rows a pass: 24 sums + 3 weights + 1 input of 32 registers

  // Rows [0, R) of the bfloat16 inputs x against the packed group at `group` (per step of 16 in k,
  // GROUP x 16 values; then each weight row's k_size % 16 tail values), writing outputs [n0, n0 + columns).
  template <int R, bool FETCH>
  static void block(const uint16_t* x, int64_t k_size, const uint16_t* group, const float* bias, float* y,
                    int64_t n_size, int64_t n0, int columns) {
    __m256 acc[R][GROUP];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < GROUP; ++c) acc[r][c] = _mm256_setzero_ps();
    const int64_t vector_end = k_size - k_size % STEP;
    for (int64_t k = 0; k < vector_end; k += STEP) {
      const uint16_t* step = group + k * GROUP;
      if (FETCH)
        for (int offset = 0; offset < GROUP * STEP; offset += 32)  // one prefetch a 64-byte line
          _mm_prefetch(reinterpret_cast<const char*>(step + offset + AHEAD), _MM_HINT_T1);
      __m256bh weights[GROUP];
      for (int c = 0; c < GROUP; ++c)
        weights[c] = (__m256bh)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + c * STEP));
      for (int r = 0; r < R; ++r) {
        const __m256bh input = (__m256bh)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * k_size + k));
        for (int c = 0; c < GROUP; ++c) acc[r][c] = _mm256_dpbf16_ps(acc[r][c], weights[c], input);
      }
    }
    const int64_t tail = k_size - vector_end;
    const uint16_t* tails = group + vector_end * GROUP;
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < columns; ++c) {
        float sum = rowdot_rows::horizontal_sum(acc[r][c]);
        for (int64_t k = 0; k < tail; ++k) sum += widen(x[r * k_size + vector_end + k]) * widen(tails[c * tail + k]);
        y[r * n_size + n0 + c] = bias ? sum + bias[n0 + c] : sum;
      }
    }
  }
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
