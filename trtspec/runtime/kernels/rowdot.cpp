// A linear layer on AVX2 + FMA whose every output is one dot product in a fixed order:
// y[r, n] = sum over k of x[r, k] * w[n, k], (+ bias[n]).
//
// Why (docs/BENCHMARKS-log.md, "A row kernel" and "Packed weights"): decoding's linear layers take 1 to
// 16 rows, where the time is reading the weights from memory. The weights are packed once at load
// (rowdot_pack) so that a call reads them in one sequential stream, prefetched into L2 8 KB ahead:
// GROUP weight rows interleaved eight floats at a time. Every input row of a call (up to ROWS at a
// time, the rest in further passes while the group's weights sit in L1, each pass prefetching its
// share of the stream: rowdot_rows.h's all_rows) meets a group's weights in one pass. On a 2-core AVX-512 AMD EPYC this read SmolLM2's 211 layers in sequence at 8 rows in
// about the time of one row (0.65 of the unpacked kernel's time at 8 rows, 0.84 at 1 row).
//
// Batch-invariant by construction: an output's sum runs over k in the same order (eight lanes of
// k modulo 8, then a fixed horizontal sum, then the scalar tail, then the bias) whichever rows
// share the call, however they are chunked and however many threads split the groups (a thread
// owns whole outputs), so a row's result is the same alone or among any other rows
// (tests/runtime/kernels/test_rt_rowdot.py). The chunk size only changes which registers hold the sums.
//
// The packed layout and the walk over it are rowdot_rows.h's (shared with rowdot_bf16.cpp).
//
// Built by trtspec/runtime/kernels/native.py with g++ -O3 -mavx2 -mfma -fopenmp (and -mavx512f -mavx512vl
// where the CPU has them: 32 vector registers, so 8 rows x 3 columns of sums fit); OpenMP is the
// same libgomp.so.1 torch loaded, so its threads are torch's.
#include <immintrin.h>
#include <stdint.h>

#include "rowdot_rows.h"

namespace {

using rowdot_rows::GROUP;

struct FloatKernel {
  using Value = float;
  using Vector = __m256;
  static constexpr int STEP = 8;  // floats of one row a multiply-add reads
#ifdef __AVX512VL__
  static constexpr int ROWS = 8;  // input rows a pass: 24 sums + 3 weights + 1 input of 32 registers
#else
  static constexpr int ROWS = 4;  // 12 sums + 3 weights + 1 input of 16 registers
#endif
  static Vector load(const float* values) { return _mm256_loadu_ps(values); }
  static __m256 madd(__m256 sums, Vector weights, Vector inputs) { return _mm256_fmadd_ps(weights, inputs, sums); }
  static float widen(float value) { return value; }
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
