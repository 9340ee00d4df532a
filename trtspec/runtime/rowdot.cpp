// A linear layer on AVX2 + FMA whose every output is one dot product in a fixed order:
// y[r, n] = sum over k of x[r, k] * w[n, k], (+ bias[n]).
//
// Why (docs/BENCHMARKS.md, "A row kernel" and "Packed weights"): decoding's linear layers take 1 to
// 16 rows, where the time is reading the weights from memory. The weights are packed once at load
// (rowdot_pack) so that a call reads them in one sequential stream, prefetched into L2 8 KB ahead:
// GROUP weight rows interleaved eight floats at a time. Every input row of a call (up to ROWS at a
// time, the rest in further chunks while the group's weights sit in L1) meets a group's weights in
// one pass. On a 2-core AVX-512 AMD EPYC this read SmolLM2's 211 layers in sequence at 8 rows in
// about the time of one row (0.65 of the unpacked kernel's time at 8 rows, 0.84 at 1 row).
//
// Batch-invariant by construction: an output's sum runs over k in the same order (eight lanes of
// k modulo 8, then a fixed horizontal sum, then the scalar tail, then the bias) whichever rows
// share the call, however they are chunked and however many threads split the groups (a thread
// owns whole outputs), so a row's result is the same alone or among any other rows
// (tests/runtime/test_rt_rowdot.py). The chunk size only changes which registers hold the sums.
//
// The packed layout and the walk over it are rowdot_rows.h's (shared with rowdot_bf16.cpp).
//
// Built by trtspec/runtime/native.py with g++ -O3 -mavx2 -mfma -fopenmp (and -mavx512f -mavx512vl
// where the CPU has them: 32 vector registers, so 8 rows x 3 columns of sums fit); OpenMP is the
// same libgomp.so.1 torch loaded, so its threads are torch's.
#include <immintrin.h>
#include <stdint.h>

#include "rowdot_rows.h"

namespace {

using rowdot_rows::GROUP;
constexpr int64_t AHEAD = 2048; // floats prefetched ahead in the weight stream (8 KB)

struct FloatKernel {
  using Value = float;
  static constexpr int STEP = 8;  // floats of one row a multiply-add reads
#ifdef __AVX512VL__
  static constexpr int ROWS = 8;  // input rows a pass: 24 sums + 3 weights + 1 input of 32 registers
#else
  static constexpr int ROWS = 4;  // 12 sums + 3 weights + 1 input of 16 registers
#endif

  // Rows [0, R) of x against the packed group at `group` (GROUP x k_size floats: the vector part,
  // GROUP x 8 floats per step of 8 in k, then each weight row's k_size % 8 tail floats), writing
  // outputs [n0, n0 + columns).
  template <int R, bool FETCH>
  static void block(const float* x, int64_t k_size, const float* group, const float* bias, float* y, int64_t n_size,
                    int64_t n0, int columns) {
    __m256 acc[R][GROUP];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < GROUP; ++c) acc[r][c] = _mm256_setzero_ps();
    const int64_t vector_end = k_size - k_size % STEP;
    for (int64_t k = 0; k < vector_end; k += STEP) {
      const float* step = group + k * GROUP;
      if (FETCH)
        for (int offset = 0; offset < GROUP * STEP; offset += 16)  // one prefetch a 64-byte line
          _mm_prefetch(reinterpret_cast<const char*>(step + offset + AHEAD), _MM_HINT_T1);
      __m256 weights[GROUP];
      for (int c = 0; c < GROUP; ++c) weights[c] = _mm256_loadu_ps(step + c * STEP);
      for (int r = 0; r < R; ++r) {
        const __m256 input = _mm256_loadu_ps(x + r * k_size + k);
        for (int c = 0; c < GROUP; ++c) acc[r][c] = _mm256_fmadd_ps(weights[c], input, acc[r][c]);
      }
    }
    const int64_t tail = k_size - vector_end;
    const float* tails = group + vector_end * GROUP;
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < columns; ++c) {
        float sum = rowdot_rows::horizontal_sum(acc[r][c]);
        for (int64_t k = 0; k < tail; ++k) sum += x[r * k_size + vector_end + k] * tails[c * tail + k];
        y[r * n_size + n0 + c] = bias ? sum + bias[n0 + c] : sum;
      }
    }
  }
};

}  // namespace

extern "C" int rowdot_group() { return GROUP; }

// w: [n_size, k_size] contiguous float32 -> packed: ceil(n_size / GROUP) * GROUP * k_size floats.
extern "C" void rowdot_pack(const float* w, int64_t n_size, int64_t k_size, float* packed) {
  rowdot_rows::pack<float, FloatKernel::STEP>(w, n_size, k_size, packed);
}

// x: [rows, k_size], packed: rowdot_pack's layout of [n_size, k_size], bias: [n_size] or null,
// y: [rows, n_size]; all contiguous float32.
extern "C" void rowdot_linear(const float* x, int64_t rows, int64_t k_size, const float* packed, int64_t n_size,
                              const float* bias, float* y, int threads) {
  rowdot_rows::linear<FloatKernel>(x, rows, k_size, packed, n_size, bias, y, threads);
}
