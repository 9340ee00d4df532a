// What the row kernels share (rowdot.cpp on float32 weights, rowdot_bf16.cpp on bfloat16 ones):
// the packed layout, the walk over the weight groups (rows of input a pass, slabs, panels split
// over the threads) and each output's sum. A kernel supplies its types and three operations:
//   Value (an element of x and of the packed weights), Vector (STEP of them in a register),
//   STEP, ROWS (input rows a pass), load(const Value*) -> Vector,
//   madd(__m256 sums, Vector weights, Vector inputs) -> __m256 (8 float32 lanes), widen(Value) -> float.
//
// Packed layout: GROUP weight rows interleaved Kernel::STEP values at a time (the vector part of k),
// then each row's k % STEP tail values; a call reads every group once, in order, as one stream.
//
// Why the walk keeps batch invariance: a thread owns whole outputs and each output is computed by
// one `block` call whose order of operations does not depend on which rows share it, so the
// chunking into passes, slabs and panels changes only which registers hold the sums.
#pragma once

#include <immintrin.h>
#include <stdint.h>

namespace rowdot_rows {

constexpr int GROUP = 3;       // weight rows interleaved in the packed layout (outputs computed together)
constexpr int PANEL = 10;      // groups a thread takes at a time
constexpr int64_t SLAB = 64;   // rows per sweep over the weights: a slab's inputs stay in L2
constexpr int AHEAD_BYTES = 8192;  // prefetched ahead in the weight stream (into L2)
// With 2 to SHARED_PASSES passes over a group, every pass prefetches its share of the stream,
// SHARED_AHEAD x AHEAD_BYTES ahead (the comment at all_rows)
constexpr int SHARED_PASSES = 3;
constexpr int SHARED_AHEAD = 2;

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// w: [n_size, k_size] contiguous -> packed: ceil(n_size / GROUP) * GROUP * k_size values (the last
// group's missing rows are zeros; their outputs are never written).
template <typename Value, int STEP>
void pack(const Value* w, int64_t n_size, int64_t k_size, Value* packed) {
  const int64_t vector_end = k_size - k_size % STEP, tail = k_size - vector_end;
  for (int64_t n0 = 0; n0 < n_size; n0 += GROUP) {
    Value* group = packed + n0 * k_size;
    for (int c = 0; c < GROUP; ++c) {
      const Value* row = n0 + c < n_size ? w + (n0 + c) * k_size : nullptr;
      for (int64_t k = 0; k < vector_end; k += STEP)
        for (int i = 0; i < STEP; ++i) group[k * GROUP + c * STEP + i] = row ? row[k + i] : Value(0);
      for (int64_t k = 0; k < tail; ++k) group[vector_end * GROUP + c * tail + k] = row ? row[vector_end + k] : Value(0);
    }
  }
}

// Where a pass prefetches when the weight stream is shared among a group's passes (all_rows): from
// step `from` (in steps of STEP), SHARED_AHEAD x AHEAD_BYTES ahead, advancing `num` / `den` of a
// step per step of its own.
struct Share {
  int64_t from, num, den;
};

// Rows [0, R) of x against the packed group at `group` (per step of STEP in k, GROUP x STEP values;
// then each weight row's k_size % STEP tail values), writing outputs [n0, n0 + columns). An output's
// sum: its 8 lanes over the steps in order, a fixed horizontal sum, the tail in k order, the bias.
// FETCH: prefetch the weight stream, AHEAD_BYTES past this step, or (SHARED) past `share`'s point.
template <class Kernel, int R, bool FETCH, bool SHARED = false>
void block(const typename Kernel::Value* x, int64_t k_size, const typename Kernel::Value* group, const float* bias,
           float* y, int64_t n_size, int64_t n0, int columns, Share share = {0, 1, 1}) {
  using Value = typename Kernel::Value;
  constexpr int STEP = Kernel::STEP;
  __m256 acc[R][GROUP];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < GROUP; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t vector_end = k_size - k_size % STEP;
  constexpr int STEP_BYTES = static_cast<int>(GROUP * STEP * sizeof(Value));
  const char* fetch = reinterpret_cast<const char*>(group + share.from * STEP * GROUP) + SHARED_AHEAD * AHEAD_BYTES;
  int64_t ticks = 0;
  for (int64_t k = 0; k < vector_end; k += STEP) {
    const Value* step = group + k * GROUP;
    if (FETCH && SHARED) {
      for (int offset = 0; offset < STEP_BYTES; offset += 64) _mm_prefetch(fetch + offset, _MM_HINT_T1);
      ticks += share.num;
      if (ticks >= share.den) {
        ticks -= share.den;
        fetch += STEP_BYTES;
      }
    } else if (FETCH) {
      for (int offset = 0; offset < STEP_BYTES; offset += 64)  // a line each
        _mm_prefetch(reinterpret_cast<const char*>(step) + offset + AHEAD_BYTES, _MM_HINT_T1);
    }
    typename Kernel::Vector weights[GROUP];
    for (int c = 0; c < GROUP; ++c) weights[c] = Kernel::load(step + c * STEP);
    for (int r = 0; r < R; ++r) {
      const typename Kernel::Vector input = Kernel::load(x + r * k_size + k);
      for (int c = 0; c < GROUP; ++c) acc[r][c] = Kernel::madd(acc[r][c], weights[c], input);
    }
  }
  const int64_t tail = k_size - vector_end;
  const Value* tails = group + vector_end * GROUP;
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < columns; ++c) {
      float sum = horizontal_sum(acc[r][c]);
      for (int64_t k = 0; k < tail; ++k)
        sum += Kernel::widen(x[r * k_size + vector_end + k]) * Kernel::widen(tails[c * tail + k]);
      y[r * n_size + n0 + c] = bias ? sum + bias[n0 + c] : sum;
    }
  }
}

// A pass of `left` (1 to R) rows, in one block of exactly that many rows (the size is known only
// at run time; each size is its own block instance).
template <class Kernel, int R, bool FETCH, bool SHARED>
inline void pass_of(int left, const typename Kernel::Value* x, int64_t k_size, const typename Kernel::Value* group,
                      const float* bias, float* y, int64_t n_size, int64_t n0, int columns, Share share = {0, 1, 1}) {
  if constexpr (R > 0) {
    if (left != R)
      return pass_of<Kernel, R - 1, FETCH, SHARED>(left, x, k_size, group, bias, y, n_size, n0, columns, share);
    block<Kernel, R, FETCH, SHARED>(x, k_size, group, bias, y, n_size, n0, columns, share);
  }
}

// Every row of x against one group, in passes of at most Kernel::ROWS rows. Two passes split the
// rows evenly (9 rows: 5 and 4, not 8 and 1; likely why it helps: a pass of 1 row keeps only GROUP
// sums in flight, too few to hide a multiply-add's latency). SmolLM2's 211 layers at 10-14 rows (a
// decode step of 8 sequences with a probe or a few drafts, 10-14 decoding through Triton at 16)
// took 0.87-0.97x the time, at 9 and 15 rows 0.94-1.01x. Three or more passes keep full passes and a smaller last one:
// an even split of 17 rows (6, 6 and 5) took 1.01-1.10x the time of 8, 8 and 1 (docs/BENCHMARKS-log.md).
// The first pass reads the weights from memory, prefetching AHEAD_BYTES ahead; later passes find
// them in L1. With two or three passes (decode steps of 9-24 sequences, a verify of 8 x 3 rows) the
// stream would stop while the later passes compute, and the next group's first pass would wait on
// memory again: there every pass prefetches its share of the stream (by its rows), further ahead.
// Measured on SmolLM2's 211 layers in turn (2-core AVX-512 EPYC, docs/BENCHMARKS-log.md): 0.88-0.89x
// the time at 16 rows, 0.90-0.95x at 14-15, 0.92-0.93x at 24, the same at 1-9. With more passes
// (prompts, long verifies) the gain fell to 0.97-1.00x and some processes ran 1.1x slower (why was
// not found), so those keep the first pass's stream.
// Prefetches and the passes' sizes only: every output's sum is the same.
template <class Kernel>
void all_rows(const typename Kernel::Value* x, int64_t rows, int64_t k_size, const typename Kernel::Value* group,
              const float* bias, float* y, int64_t n_size, int64_t n0, int columns) {
  constexpr int R = Kernel::ROWS;
  const int64_t passes = (rows + R - 1) / R;
  const bool shared = passes > 1 && passes <= SHARED_PASSES;
  const int64_t steps = k_size / Kernel::STEP;
  for (int64_t pass = 0, r = 0; pass < passes; ++pass) {
    const int64_t even = rows / 2 + (pass < rows % 2 ? 1 : 0), full = rows - r < R ? rows - r : R;
    const int size = static_cast<int>(passes == 2 ? even : full);
    const Share share{r * steps / rows, size, rows};
    const typename Kernel::Value* xs = x + r * k_size;
    float* ys = y + r * n_size;
    if (shared) pass_of<Kernel, R, true, true>(size, xs, k_size, group, bias, ys, n_size, n0, columns, share);
    else if (pass == 0) pass_of<Kernel, R, true, false>(size, xs, k_size, group, bias, ys, n_size, n0, columns);
    else pass_of<Kernel, R, false, false>(size, xs, k_size, group, bias, ys, n_size, n0, columns);
    r += size;
  }
}

// x: [rows, k_size] in the kernel's input type, packed: pack's layout of [n_size, k_size], bias:
// [n_size] float32 or null, y: [rows, n_size] float32; all contiguous.
template <class Kernel>
void linear(const typename Kernel::Value* x, int64_t rows, int64_t k_size, const typename Kernel::Value* packed,
            int64_t n_size, const float* bias, float* y, int threads) {
  const int64_t groups = (n_size + GROUP - 1) / GROUP, panels = (groups + PANEL - 1) / PANEL;
  for (int64_t slab = 0; slab < rows; slab += SLAB) {
    const int64_t slab_rows = rows - slab < SLAB ? rows - slab : SLAB;
    const typename Kernel::Value* xs = x + slab * k_size;
    float* ys = y + slab * n_size;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t last = (p + 1) * PANEL < groups ? (p + 1) * PANEL : groups;
      for (int64_t g = p * PANEL; g < last; ++g) {
        const int64_t n0 = g * GROUP;
        const int columns = n_size - n0 < GROUP ? static_cast<int>(n_size - n0) : GROUP;
        all_rows<Kernel>(xs, slab_rows, k_size, packed + n0 * k_size, bias, ys, n_size, n0, columns);
      }
    }
  }
}

}  // namespace rowdot_rows
