// A linear layer on AVX2 + FMA whose every output is one dot product in a fixed order:
// y[r, n] = sum over k of x[r, k] * w[n, k], (+ bias[n]).
//
// Why (docs/BENCHMARKS.md, "A row kernel"): on SmolLM2's shapes on a 2-core AVX2 AMD EPYC, oneDNN's
// prepacked inner product read the weights at about 60 % of what a plain sum over them reaches;
// this loop streams four weight rows at a time and multiplies them with every input row while they
// sit in L1 (4 to 8 rows: one weight row at a time against all of them), so SmolLM2's linear
// layers in sequence took 0.6 of oneDNN's time at 1 and 8 rows and about as long at 64.
//
// Batch-invariant by construction: an output's sum runs over k in the same order (eight lanes of
// k modulo 8, then a fixed horizontal sum, then the scalar tail) whichever rows share the call and
// however many threads split the columns (a thread owns whole outputs), so a row's result is the
// same alone or among any other rows (tests/runtime/test_rt_rowdot.py).
//
// Built by trtspec/runtime/rowdot.py with g++ -O3 -mavx2 -mfma -fopenmp; OpenMP is the same
// libgomp.so.1 torch loaded, so its threads are torch's.
#include <immintrin.h>
#include <stdint.h>

namespace {

#ifndef PREFETCH
#define PREFETCH 4096
#endif

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Outputs [n0, n0 + C) of rows [0, R): C weight rows against R input rows, k in steps of 8.
template <int R, int C, bool FETCH>
void block(const float* x, int64_t k_size, const float* w, const float* bias, float* y, int64_t n_size,
           int64_t n0) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const float* w0 = w + n0 * k_size;
  const int64_t vector_end = k_size - k_size % 8;
  for (int64_t k = 0; k < vector_end; k += 8) {
    __m256 weights[C];
    for (int c = 0; c < C; ++c) {
      weights[c] = _mm256_loadu_ps(w0 + c * k_size + k);
      if (FETCH) _mm_prefetch(reinterpret_cast<const char*>(w0 + c * k_size + k + PREFETCH), _MM_HINT_T0);
    }
    for (int r = 0; r < R; ++r) {
      const __m256 input = _mm256_loadu_ps(x + r * k_size + k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(weights[c], input, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = horizontal_sum(acc[r][c]);
      for (int64_t k = vector_end; k < k_size; ++k) sum += x[r * k_size + k] * w0[c * k_size + k];
      y[r * n_size + n0 + c] = bias ? sum + bias[n0 + c] : sum;
    }
  }
}

constexpr int COLUMNS = 4;  // weight rows per block
constexpr int ROWS = 3;     // input rows per block: 12 accumulators + 4 weights + 1 input of 16 registers
constexpr int PANEL = 8;    // blocks per panel: a panel's weights (32 x in_features floats) stay in L2

// Every row of x (4 to 8 of them) against column n in one pass: the weights are read once, while
// three rows at a time (below) read them three times for 8 rows and wait on the cache between
// passes (8 rows: 0.88-0.90 of the time over SmolLM2's layers on the AVX2 EPYC). Each output's
// arithmetic is the same as in block<3, 4> (the blocking never changes an output's sum).
inline void one_pass(const float* x, int64_t rows, int64_t k_size, const float* w, const float* bias, float* y,
                     int64_t n_size, int64_t n) {
  switch (rows) {
    case 4: block<4, 1, true>(x, k_size, w, bias, y, n_size, n); break;
    case 5: block<5, 1, true>(x, k_size, w, bias, y, n_size, n); break;
    case 6: block<6, 1, true>(x, k_size, w, bias, y, n_size, n); break;
    case 7: block<7, 1, true>(x, k_size, w, bias, y, n_size, n); break;
    case 8: block<8, 1, true>(x, k_size, w, bias, y, n_size, n); break;
  }
}

// Every row of x against the blocks [first, last) of C columns each: the rows, three at a time, sweep
// the panel's blocks, so three input rows stay in L1 while the panel's weights come from L2 (on
// wide inputs x itself does not fit in L2). The first sweep reads the weights from memory and
// prefetches the blocks after it; later sweeps find them in L2.
template <int C>
void panel(const float* x, int64_t rows, int64_t k_size, const float* w, const float* bias, float* y,
           int64_t n_size, int64_t first, int64_t last) {
  if (rows >= 4 && rows <= 8) {  // a decode batch: all rows in one pass, one column at a time
    for (int64_t n = first * C; n < last * C; ++n) one_pass(x, rows, k_size, w, bias, y, n_size, n);
    return;
  }
  int64_t r = 0;
  for (; r + ROWS <= rows; r += ROWS) {
    for (int64_t b = first; b < last; ++b) {
      if (r == 0) block<ROWS, C, true>(x, k_size, w, bias, y, n_size, b * C);
      else block<ROWS, C, false>(x + r * k_size, k_size, w, bias, y + r * n_size, n_size, b * C);
    }
  }
  for (int64_t b = first; b < last; ++b) {
    if (rows - r == 2) {
      if (r == 0) block<2, C, true>(x, k_size, w, bias, y, n_size, b * C);
      else block<2, C, false>(x + r * k_size, k_size, w, bias, y + r * n_size, n_size, b * C);
    } else if (rows - r == 1) {
      if (r == 0) block<1, C, true>(x, k_size, w, bias, y, n_size, b * C);
      else block<1, C, false>(x + r * k_size, k_size, w, bias, y + r * n_size, n_size, b * C);
    }
  }
}

}  // namespace

// x: [rows, k_size], w: [n_size, k_size], bias: [n_size] or null, y: [rows, n_size]; all contiguous float32.
extern "C" void rowdot_linear(const float* x, int64_t rows, int64_t k_size, const float* w, int64_t n_size,
                              const float* bias, float* y, int threads) {
  const int64_t blocks = n_size / COLUMNS, panels = (blocks + PANEL - 1) / PANEL;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t first = p * PANEL, last = first + PANEL < blocks ? first + PANEL : blocks;
    panel<COLUMNS>(x, rows, k_size, w, bias, y, n_size, first, last);
  }
  panel<1>(x, rows, k_size, w, bias, y, n_size, blocks * COLUMNS, n_size);  // the last n_size % 4 columns
}
