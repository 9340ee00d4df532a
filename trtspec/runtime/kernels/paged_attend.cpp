// Attention of a packed batch over the paged KV cache on AVX2 + FMA, every (row, head) output in a
// fixed order of operations, in one call per layer.
//
// Why (docs/BENCHMARKS-log.md, "Attention in one call"): with torch's batched products a layer's
// attention was two small matrix products per sequence (or per key head in lanes) plus scale, bias,
// softmax and the copies around them: ~8 ms of a ~65 ms decode step at one sequence and ~27 ms of
// ~120 ms at eight on SmolLM2 on a 2-core AVX2 AMD EPYC, nearly all of it call overhead, not
// arithmetic (eight sequences of 192 keys are ~2 M multiply-adds a layer).
//
// Batch-invariant by construction: the output of query row t, head h depends only on that row's
// query, its keys, values and bias. Its score for key j is one chain of multiply-adds over the head
// dimension in order; the softmax's maximum is exact, its sum runs over the keys in eight lanes
// (key j in lane j mod 8) and a fixed horizontal sum; each output element is one chain of
// multiply-adds over the keys in order. No step depends on which other rows share the call, how
// they are split into work items or how many threads run them (a thread owns whole outputs).
//
// Built with rowdot.cpp by trtspec/runtime/kernels/native.py (g++ -O3 -mavx2 -mfma -ffp-contract=off -fopenmp).
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#include <vector>

namespace {

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float horizontal_max(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x for x <= 0 (scores minus their maximum): Cody-Waite reduction by ln 2 and a degree-5
// polynomial (Cephes' expf coefficients, relative error ~2e-7); below -87.3 (e^x under float's
// smallest normal) the result is exactly 0, so a -inf bias gives a key exactly zero weight.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.3f);
  const __m256 underflow = _mm256_cmp_ps(x, lowest, _CMP_LT_OQ);  // also true for -inf; NaN stays NaN
  x = _mm256_max_ps(x, lowest);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
  return _mm256_andnot_ps(underflow, result);
}

// Eight keys from j: one vector load when the sequence's slots are one run (base >= 0), else one by one
// through its block table's slots.
inline __m256 load_keys(const float* row, int64_t base, const int64_t* slot_of, int64_t j) {
  if (base >= 0) return _mm256_loadu_ps(row + base + j);
  alignas(32) float picked[8];
  for (int l = 0; l < 8; ++l) picked[l] = row[slot_of[j + l]];
  return _mm256_load_ps(picked);
}

// Scores of G query heads for keys [j, j + 8 V): each one multiply-add chain over the head
// dimension in order, from zero (the blocking of keys and heads never changes a chain).
// FETCH: also ask for keys [j, j + 8 V) of the next item, whose first key is at `ahead` (into L2).
template <int G, int V, bool FETCH>
void score_keys(const float* q, int64_t d, const float* keys, int64_t key_row, const int64_t* slot_of,
                int64_t base, int64_t j, int64_t count, const float* bias, float scaling, float* scores,
                const float* ahead) {
  __m256 acc[G][V];
  for (int i = 0; i < G; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = _mm256_setzero_ps();
  for (int64_t e = 0; e < d; ++e) {
    if constexpr (FETCH)
      for (int v = 0; v < V; v += 2)  // a cache line holds 16 keys
        _mm_prefetch(reinterpret_cast<const char*>(ahead + e * key_row + j + 8 * v), _MM_HINT_T1);
    const float* row = keys + e * key_row;  // key row e: the keys' e-th elements side by side
    __m256 k[V];
    for (int v = 0; v < V; ++v) k[v] = load_keys(row, base, slot_of, j + 8 * v);
    for (int i = 0; i < G; ++i) {
      const __m256 qe = _mm256_set1_ps(q[i * d + e]);
      for (int v = 0; v < V; ++v) acc[i][v] = _mm256_fmadd_ps(qe, k[v], acc[i][v]);
    }
  }
  const __m256 scale = _mm256_set1_ps(scaling);
  for (int v = 0; v < V; ++v) {
    const __m256 mask = _mm256_loadu_ps(bias + j + 8 * v);
    for (int i = 0; i < G; ++i)
      _mm256_storeu_ps(scores + i * count + j + 8 * v, _mm256_add_ps(_mm256_mul_ps(acc[i][v], scale), mask));
  }
}

// Outputs [e, e + 8 V) of G heads: each element one multiply-add chain over the keys in order.
// FETCH: also ask for the next item's value rows [0, count), the first at `ahead` (into L2).
template <int G, int V, bool FETCH>
void weigh_values(const float* values, int64_t d, const int64_t* slot_of, int64_t base, int64_t count,
                  const float* scores, int64_t e, float* out, const float* ahead) {
  __m256 acc[G][V];
  for (int i = 0; i < G; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = _mm256_setzero_ps();
  for (int64_t j = 0; j < count; ++j) {
    if constexpr (FETCH)
      for (int64_t line = 0; line < d; line += 16)  // a cache line holds 16 floats
        _mm_prefetch(reinterpret_cast<const char*>(ahead + j * d + line), _MM_HINT_T1);
    const float* row = values + (base >= 0 ? base + j : slot_of[j]) * d + e;
    __m256 value[V];
    for (int v = 0; v < V; ++v) value[v] = _mm256_loadu_ps(row + 8 * v);
    for (int i = 0; i < G; ++i) {
      const __m256 weight = _mm256_set1_ps(scores[i * count + j]);
      for (int v = 0; v < V; ++v) acc[i][v] = _mm256_fmadd_ps(weight, value[v], acc[i][v]);
    }
  }
  for (int i = 0; i < G; ++i)
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + i * d + e + 8 * v, acc[i][v]);
}

// Query heads [h0, h0 + G) of row t (all reading one key head): scores, softmax, weighted values.
// Keys in runs of 32 and the head dimension in runs of 32 where they allow it (G x 4 accumulators
// in registers, whole cache lines of keys and values), else of 8. FETCH: the next item's keys and
// values (at keys_ahead, values_ahead) are asked for along the way.
template <int G, bool FETCH>
void attend_heads(const float* q, int64_t d, const float* keys, int64_t key_row, const float* values,
                  const int64_t* slot_of, int64_t base, int64_t count, const float* bias, float scaling,
                  float* out, float* scores, const float* keys_ahead, const float* values_ahead) {
  constexpr int V = G <= 3 ? 4 : 2;
  int64_t j = 0;
  for (; j + 8 * V <= count; j += 8 * V)
    score_keys<G, V, FETCH>(q, d, keys, key_row, slot_of, base, j, count, bias, scaling, scores, keys_ahead);
  for (; j < count; j += 8)
    score_keys<G, 1, FETCH>(q, d, keys, key_row, slot_of, base, j, count, bias, scaling, scores, keys_ahead);
  // softmax per head: exact maximum, exponentials, a lane-fixed sum, weights = e / sum
  for (int i = 0; i < G; ++i) {
    float* s = scores + i * count;
    __m256 top = _mm256_set1_ps(-__builtin_inff());
    for (int64_t k = 0; k < count; k += 8) top = _mm256_max_ps(top, _mm256_loadu_ps(s + k));
    const __m256 peak = _mm256_set1_ps(horizontal_max(top));
    __m256 total = _mm256_setzero_ps();
    for (int64_t k = 0; k < count; k += 8) {
      const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + k), peak));
      _mm256_storeu_ps(s + k, e);
      total = _mm256_add_ps(total, e);
    }
    const __m256 inverse = _mm256_set1_ps(1.0f / horizontal_sum(total));
    for (int64_t k = 0; k < count; k += 8) _mm256_storeu_ps(s + k, _mm256_mul_ps(_mm256_loadu_ps(s + k), inverse));
  }
  int64_t e = 0;
  if (8 * V <= d) {  // the first run of the head dimension asks for the next item's values
    weigh_values<G, V, FETCH>(values, d, slot_of, base, count, scores, e, out, values_ahead);
    e = 8 * V;
  }
  for (; e + 8 * V <= d; e += 8 * V)
    weigh_values<G, V, false>(values, d, slot_of, base, count, scores, e, out, nullptr);
  for (; e < d; e += 8) weigh_values<G, 1, false>(values, d, slot_of, base, count, scores, e, out, nullptr);
}

// attend_heads<G> with the next item's reads asked for (where keys_ahead is given) or not.
template <int G>
void attend_heads_fetching(const float* q, int64_t d, const float* keys, int64_t key_row, const float* values,
                           const int64_t* slot_of, int64_t base, int64_t count, const float* bias, float scaling,
                           float* out, float* scores, const float* keys_ahead, const float* values_ahead) {
  if (keys_ahead)
    attend_heads<G, true>(q, d, keys, key_row, values, slot_of, base, count, bias, scaling, out, scores, keys_ahead,
                          values_ahead);
  else
    attend_heads<G, false>(q, d, keys, key_row, values, slot_of, base, count, bias, scaling, out, scores, nullptr,
                           nullptr);
}

void attend_group(int group, const float* q, int64_t d, const float* keys, int64_t key_row, const float* values,
                  const int64_t* slot_of, int64_t base, int64_t count, const float* bias, float scaling,
                  float* out, float* scores, const float* keys_ahead, const float* values_ahead) {
  // heads of one key head in passes of up to four (each pass: the same per-head arithmetic); the
  // first pass reads the keys and values from memory and asks for the next item's
  for (int h = 0; h < group;) {
    const int left = group - h;
    const float* qh = q + h * d;
    float* oh = out + h * d;
    const float* pass_keys_ahead = h == 0 ? keys_ahead : nullptr;  // later passes read from cache
    if (left >= 4) {
      attend_heads_fetching<4>(qh, d, keys, key_row, values, slot_of, base, count, bias, scaling, oh, scores,
                               pass_keys_ahead, values_ahead);
      h += 4;
    } else if (left == 3) {
      attend_heads_fetching<3>(qh, d, keys, key_row, values, slot_of, base, count, bias, scaling, oh, scores,
                               pass_keys_ahead, values_ahead);
      h += 3;
    } else if (left == 2) {
      attend_heads_fetching<2>(qh, d, keys, key_row, values, slot_of, base, count, bias, scaling, oh, scores,
                               pass_keys_ahead, values_ahead);
      h += 2;
    } else {
      attend_heads_fetching<1>(qh, d, keys, key_row, values, slot_of, base, count, bias, scaling, oh, scores,
                               pass_keys_ahead, values_ahead);
      h += 1;
    }
  }
}

}  // namespace

// An item's fixed cost (softmax set-up, writing its outputs) in keys' worth, for the split over threads.
constexpr int64_t ITEM_KEYS = 16;

// query: [T, heads, d]; keys: [kv_heads, d, key_row] (pool keys of one layer, transposed, rows of
// key_row floats); values: [kv_heads, slots, d]; out: [T, heads, d]; d a multiple of 8.
extern "C" void paged_attend(const float* query, int64_t rows, int64_t heads, int64_t kv_heads, int64_t d,
                             const float* keys, int64_t key_row, const float* values, int64_t slots,
                             const int64_t* base, const int64_t* gather, const int64_t* gather_at,
                             const int64_t* key_counts, const float* bias, const int64_t* bias_at, float scaling,
                             float* out, int threads) {
  const int group = static_cast<int>(heads / kv_heads);
  int64_t longest = 0, total = 0;  // total: every item's keys and fixed cost, the work to share
  for (int64_t t = 0; t < rows; ++t) {
    longest = key_counts[t] > longest ? key_counts[t] : longest;
    total += (key_counts[t] + ITEM_KEYS) * kv_heads;
  }
  const int64_t items = rows * kv_heads;
#pragma omp parallel num_threads(threads) if (threads > 1 && items > 1)
  {
    std::vector<float> scores(static_cast<size_t>(longest) * 4);
    // Work items key head major: a thread's consecutive items (a prompt's rows, one after another)
    // read the same key head's keys and values (a 1,000-token SmolLM2 prompt: 256 KB of each a key
    // head and layer, within one core's 1 MB L2 on the EPYC it was measured on), where row major
    // they cycled through all key heads. Each thread takes one run of items holding an equal share
    // of the keys to read: a prompt's rows see more keys row by row, so equal numbers of items
    // were unequal work. A 1,000-token prefill's attention: 480 ms row major, 277 key head major,
    // 237 with the shares (docs/BENCHMARKS-log.md). Each item's arithmetic is the same whoever runs it.
    const int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t from = total * me / team, to = total * (me + 1) / team;
    int64_t before = 0;
    for (int64_t item = 0; item < items; ++item) {
      const int64_t g = item / rows, t = item % rows;
      const int64_t start = before;
      before += key_counts[t] + ITEM_KEYS;
      if (start < from) continue;  // an earlier thread's: its work starts in that thread's share
      if (start >= to) break;      // the later threads'
      const int64_t* slot_of = base[t] >= 0 ? nullptr : gather + gather_at[t];
      // While this item computes, the next one's keys and values are asked for where it reads
      // others from one run of slots (another sequence or key head: a prompt's next row reads
      // these, already in cache, where asking anyway cost its attention 9-27 %). Why: a decoding
      // row's keys are d runs of ~100-1,000 floats, one per head-dimension row of the transposed
      // pool, too short for the hardware prefetchers to follow before they end: 8 sequences'
      // attention over 30 layers from memory took 3.1-3.5 ms at ~100 keys, 2.1-2.2 with this
      // (0.7 from cache; docs/BENCHMARKS-log.md, "The next item's keys asked for ahead").
      const int64_t next_t = (item + 1) % rows, next_g = (item + 1) / rows;
      const float *keys_ahead = nullptr, *values_ahead = nullptr;
      if (item + 1 < items && base[next_t] >= 0 && (base[next_t] != base[t] || next_g != g)) {
        keys_ahead = keys + next_g * d * key_row + base[next_t];
        values_ahead = values + (next_g * slots + base[next_t]) * d;
      }
      attend_group(group, query + (t * heads + g * group) * d, d, keys + g * d * key_row, key_row,
                   values + g * slots * d, slot_of, base[t], key_counts[t], bias + bias_at[t], scaling,
                   out + (t * heads + g * group) * d, scores.data(), keys_ahead, values_ahead);
    }
  }
}
