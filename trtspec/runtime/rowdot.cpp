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
// Built by trtspec/runtime/native.py with g++ -O3 -mavx2 -mfma -fopenmp (and -mavx512f -mavx512vl
// where the CPU has them: 32 vector registers, so 8 rows x 3 columns of sums fit); OpenMP is the
// same libgomp.so.1 torch loaded, so its threads are torch's.
#include <immintrin.h>
#include <stdint.h>

namespace {

constexpr int GROUP = 3;  // weight rows interleaved in the packed layout (outputs computed together)
#ifdef __AVX512VL__
constexpr int ROWS = 8;   // input rows a pass: 24 sums + 3 weights + 1 input of 32 registers
#else
constexpr int ROWS = 4;   // 12 sums + 3 weights + 1 input of 16 registers
#endif
constexpr int PANEL = 10;       // groups a thread takes at a time
constexpr int64_t SLAB = 64;    // rows per sweep over the weights: a slab's inputs stay in L2
constexpr int64_t AHEAD = 2048; // floats prefetched ahead in the weight stream (8 KB)

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows [0, R) of x against the packed group at `group` (GROUP x k_size floats: the vector part,
// GROUP x 8 floats per step of 8 in k, then each weight row's k_size % 8 tail floats), writing
// outputs [n0, n0 + columns).
template <int R, bool FETCH>
void block(const float* x, int64_t k_size, const float* group, const float* bias, float* y, int64_t n_size,
           int64_t n0, int columns) {
  __m256 acc[R][GROUP];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < GROUP; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t vector_end = k_size - k_size % 8;
  for (int64_t k = 0; k < vector_end; k += 8) {
    const float* step = group + k * GROUP;
    if (FETCH)
      for (int offset = 0; offset < GROUP * 8; offset += 16)  // one prefetch a 64-byte line
        _mm_prefetch(reinterpret_cast<const char*>(step + offset + AHEAD), _MM_HINT_T1);
    __m256 weights[GROUP];
    for (int c = 0; c < GROUP; ++c) weights[c] = _mm256_loadu_ps(step + c * 8);
    for (int r = 0; r < R; ++r) {
      const __m256 input = _mm256_loadu_ps(x + r * k_size + k);
      for (int c = 0; c < GROUP; ++c) acc[r][c] = _mm256_fmadd_ps(weights[c], input, acc[r][c]);
    }
  }
  const int64_t tail = k_size - vector_end;
  const float* tails = group + vector_end * GROUP;
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < columns; ++c) {
      float sum = horizontal_sum(acc[r][c]);
      for (int64_t k = 0; k < tail; ++k) sum += x[r * k_size + vector_end + k] * tails[c * tail + k];
      y[r * n_size + n0 + c] = bias ? sum + bias[n0 + c] : sum;
    }
  }
}

template <int R>
inline void rows_block(bool first, const float* x, int64_t k_size, const float* group, const float* bias, float* y,
                       int64_t n_size, int64_t n0, int columns) {
  if (first) block<R, true>(x, k_size, group, bias, y, n_size, n0, columns);
  else block<R, false>(x, k_size, group, bias, y, n_size, n0, columns);
}

// Every row of x against one group: ROWS rows at a time, then the remainder; the first chunk reads
// the weights from memory (and prefetches the next groups), later ones find them in L1.
void all_rows(const float* x, int64_t rows, int64_t k_size, const float* group, const float* bias, float* y,
              int64_t n_size, int64_t n0, int columns) {
  int64_t r = 0;
  for (; r + ROWS <= rows; r += ROWS)
    rows_block<ROWS>(r == 0, x + r * k_size, k_size, group, bias, y + r * n_size, n_size, n0, columns);
  const float* xr = x + r * k_size;
  float* yr = y + r * n_size;
  switch (rows - r) {
    case 1: rows_block<1>(r == 0, xr, k_size, group, bias, yr, n_size, n0, columns); break;
    case 2: rows_block<2>(r == 0, xr, k_size, group, bias, yr, n_size, n0, columns); break;
    case 3: rows_block<3>(r == 0, xr, k_size, group, bias, yr, n_size, n0, columns); break;
#ifdef __AVX512VL__
    case 4: rows_block<4>(r == 0, xr, k_size, group, bias, yr, n_size, n0, columns); break;
    case 5: rows_block<5>(r == 0, xr, k_size, group, bias, yr, n_size, n0, columns); break;
    case 6: rows_block<6>(r == 0, xr, k_size, group, bias, yr, n_size, n0, columns); break;
    case 7: rows_block<7>(r == 0, xr, k_size, group, bias, yr, n_size, n0, columns); break;
#endif
  }
}

}  // namespace

extern "C" int rowdot_group() { return GROUP; }

// w: [n_size, k_size] contiguous float32 -> packed: ceil(n_size / GROUP) * GROUP * k_size floats
// (the last group's missing rows are zeros; their outputs are never written).
extern "C" void rowdot_pack(const float* w, int64_t n_size, int64_t k_size, float* packed) {
  const int64_t vector_end = k_size - k_size % 8, tail = k_size - vector_end;
  for (int64_t n0 = 0; n0 < n_size; n0 += GROUP) {
    float* group = packed + n0 * k_size;
    for (int c = 0; c < GROUP; ++c) {
      const float* row = n0 + c < n_size ? w + (n0 + c) * k_size : nullptr;
      for (int64_t k = 0; k < vector_end; k += 8)
        for (int i = 0; i < 8; ++i) group[k * GROUP + c * 8 + i] = row ? row[k + i] : 0.0f;
      for (int64_t k = 0; k < tail; ++k) group[vector_end * GROUP + c * tail + k] = row ? row[vector_end + k] : 0.0f;
    }
  }
}

// x: [rows, k_size], packed: rowdot_pack's layout of [n_size, k_size], bias: [n_size] or null,
// y: [rows, n_size]; all contiguous float32.
extern "C" void rowdot_linear(const float* x, int64_t rows, int64_t k_size, const float* packed, int64_t n_size,
                              const float* bias, float* y, int threads) {
  const int64_t groups = (n_size + GROUP - 1) / GROUP, panels = (groups + PANEL - 1) / PANEL;
  for (int64_t slab = 0; slab < rows; slab += SLAB) {
    const int64_t slab_rows = rows - slab < SLAB ? rows - slab : SLAB;
    const float* xs = x + slab * k_size;
    float* ys = y + slab * n_size;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t last = (p + 1) * PANEL < groups ? (p + 1) * PANEL : groups;
      for (int64_t g = p * PANEL; g < last; ++g) {
        const int64_t n0 = g * GROUP;
        const int columns = n_size - n0 < GROUP ? static_cast<int>(n_size - n0) : GROUP;
        all_rows(xs, slab_rows, k_size, packed + n0 * k_size, bias, ys, n_size, n0, columns);
      }
    }
  }
}
