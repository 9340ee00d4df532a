// A Llama model's decoder layers in one call: per layer the RMS norm, q, k and v in one row-kernel
// call, rotary embedding and cache write (rope_write), paged attention (paged_attend), o_proj and the
// residual, the second norm, gate and up in one call, SiLU x up, down_proj and the residual.
//
// Why (docs/BENCHMARKS-log.md, "The decoder layers in one call"): a lone sequence's decode forward of
// SmolLM2 spent ~7.9 of its ~26.8 ms in Python and torch's small operations (30 layers x ~20 of them,
// each a few microseconds of dispatch on 576 or 1536 floats) while the second core spun in the
// OpenMP barrier; here they are a few microseconds a layer.
//
// The same numbers as trtspec.runtime.forward.llama_forward's torch operations, bit for bit, by doing what
// torch 2.13's CPU kernels do, element for element (trtspec.runtime.forward.native_layers probes it against
// torch on the model's own sizes before the engine uses this, and keeps torch's path where it differs):
// - the norm's mean of squares: torch's sum kernel on a contiguous row (8-lane vectors, 4
//   interleaved accumulators, the cascade of levels over 16-row steps, lanes added in order after the
//   scalar tail), then / n; then 1 / sqrt(mean + eps), x * that, weight * that, each rounded alone;
// - SiLU: x / (1 + exp(-x)) with torch's vectorized exp (SLEEF's expf_u10, passed in as a
//   function pointer from libtorch_cpu, 16 or 8 lanes as torch's kernels use), then x up;
// - residual adds, elementwise.
// Built with -ffp-contract=off (native.py): no multiply and add fuse into one rounding.
// Every row is computed alone, so this is as batch-invariant as the kernels it calls. With more than
// one row, the rotary embedding and cache write and SiLU x up split the rows over the threads (the
// other threads only waited for them: a batch-8 decode forward 1.31x faster than the Python loop with
// them on one thread, 1.48-1.52x split, in two runs of the same A/B).
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include <memory>

extern "C" void rowdot_linear(const float* x, int64_t rows, int64_t k_size, const float* packed, int64_t n_size,
                              const float* bias, float* y, int threads);
// present where the CPU has AVX512_BF16 (rowdot_bf16.cpp); weak, so the library links without it
extern "C" __attribute__((weak)) void rowdot_bf16_linear(const float* x, int64_t rows, int64_t k_size,
                                                        const uint16_t* packed, int64_t n_size, const float* bias,
                                                        float* y, int threads);
extern "C" void rope_write(const float* query, int64_t query_row, const float* key, int64_t key_row_in,
                           const float* value, int64_t value_row, int64_t rows, int64_t heads, int64_t kv_heads,
                           int64_t d, const float* cos, const float* sin, const int64_t* slots, float* keys,
                           int64_t key_row, float* values, int64_t num_slots, float* query_out);
extern "C" void paged_attend(const float* query, int64_t rows, int64_t heads, int64_t kv_heads, int64_t d,
                             const float* keys, int64_t key_row, const float* values, int64_t slots,
                             const int64_t* base, const int64_t* gather, const int64_t* gather_at,
                             const int64_t* key_counts, const float* bias, const int64_t* bias_at, float scaling,
                             float* out, int threads);

namespace {

constexpr int LANES = 8;  // torch's sum kernel: 8-lane vectors (its AVX2 build, also on AVX-512 CPUs)
constexpr int ILP = 4;    // interleaved vector accumulators
constexpr int LEVELS = 4;

struct Lanes {
  float v[LANES];
};

// sum over e of x[e] * x[e], in the order of torch's cascade_sum on one contiguous row of n floats
float sum_of_squares(const float* x, int64_t n) {
  const int64_t vectors = n / LANES, size = vectors / ILP;
  int power = 0;
  while ((int64_t(1) << power) < size) ++power;
  const int level_power = power / LEVELS > 4 ? power / LEVELS : 4;
  const int64_t step = int64_t(1) << level_power, mask = step - 1;
  Lanes acc[LEVELS][ILP] = {};
  auto add_vectors = [&](int64_t i) {  // vectors 4 i .. 4 i + 3 into level 0
    for (int k = 0; k < ILP; ++k)
      for (int l = 0; l < LANES; ++l) {
        const float value = x[(i * ILP + k) * LANES + l];
        acc[0][k].v[l] += value * value;
      }
  };
  int64_t i = 0;
  while (i + step <= size) {
    for (int64_t j = 0; j < step; ++j, ++i) add_vectors(i);
    for (int j = 1; j < LEVELS; ++j) {
      for (int k = 0; k < ILP; ++k)
        for (int l = 0; l < LANES; ++l) {
          acc[j][k].v[l] += acc[j - 1][k].v[l];
          acc[j - 1][k].v[l] = 0.f;
        }
      if ((i & (mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < size; ++i) add_vectors(i);
  for (int j = 1; j < LEVELS; ++j)
    for (int k = 0; k < ILP; ++k)
      for (int l = 0; l < LANES; ++l) acc[0][k].v[l] += acc[j][k].v[l];
  Lanes total = acc[0][0];
  for (int64_t r = size * ILP; r < vectors; ++r)
    for (int l = 0; l < LANES; ++l) total.v[l] += x[r * LANES + l] * x[r * LANES + l];
  for (int k = 1; k < ILP; ++k)
    for (int l = 0; l < LANES; ++l) total.v[l] += acc[0][k].v[l];
  float sum = 0.f;
  for (int64_t e = vectors * LANES; e < n; ++e) sum += x[e] * x[e];
  for (int l = 0; l < LANES; ++l) sum += total.v[l];
  return 0.f + sum;  // torch accumulates into an output filled with zeros
}

// work(begin, end) over rows [0, rows) in one contiguous share a thread, where there is more than one
// row and thread: every row's numbers are computed alone, so the split changes none of them.
template <typename Work>
void split_rows(int64_t rows, int threads, Work work) {
  if (threads <= 1 || rows <= 1) {
    work(int64_t(0), rows);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
    work(rows * me / team, rows * (me + 1) / team);
  }
}

}  // namespace

// out[r] = weight * (x[r] * (1 / sqrt(mean(x[r]^2) + eps))) for rows of n floats
extern "C" void llama_rms_norm(const float* x, const float* weight, float eps, int64_t rows, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    const float scale = 1.0f / sqrtf(sum_of_squares(row, n) / static_cast<float>(n) + eps);
    for (int64_t e = 0; e < n; ++e) out[r * n + e] = weight[e] * (row[e] * scale);
  }
}

// out[r] = silu(gate_up[r, :n]) * gate_up[r, n:2n]; `exp`: torch's vector exp of `lanes` (16 or 8) floats.
// torch's elementwise loop (ATen/native/cpu/Loops.h, vectorized_loop) takes two vectors a step and
// the rest (under 2 x lanes) on the scalar op, whose std::exp rounds otherwise: so only the first
// n - n % (2 x lanes) go through the vector exp here (an odd count of vectors rounded its last one
// apart from torch: intermediate 200 at 8 lanes, 208 at 16; tests/runtime/forward/test_rt_native_layers.py).
extern "C" void llama_silu_mul(const float* gate_up, int64_t rows, int64_t n, void* exp, int lanes, float* out) {
  const int64_t vectorized = n - n % (2 * lanes);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * n;
    const float* up = gate + n;
    float* to = out + r * n;
    int64_t e = 0;
#ifdef __AVX512F__
    if (lanes == 16) {
      auto vector_exp = reinterpret_cast<__m512 (*)(__m512)>(exp);
      const __m512 one = _mm512_set1_ps(1.f);
      const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
      for (; e < vectorized; e += 16) {
        const __m512 x = _mm512_loadu_ps(gate + e);
        const __m512 negated = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign));
        const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, vector_exp(negated)));
        _mm512_storeu_ps(to + e, _mm512_mul_ps(silu, _mm512_loadu_ps(up + e)));
      }
    }
#endif
    if (lanes == 8) {
      auto vector_exp = reinterpret_cast<__m256 (*)(__m256)>(exp);
      const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.f);
      for (; e < vectorized; e += 8) {
        const __m256 x = _mm256_loadu_ps(gate + e);
        const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, vector_exp(_mm256_xor_ps(x, sign))));
        _mm256_storeu_ps(to + e, _mm256_mul_ps(silu, _mm256_loadu_ps(up + e)));
      }
    }
    for (; e < n; ++e) to[e] = (gate[e] / (1.f + expf(-gate[e]))) * up[e];  // the probe decides whether this agrees
  }
}

// What one layer's row of `table` holds, as addresses (0: none): norms' weights, the packed
// weights (rowdot_pack's layout, or rowdot_bf16_pack's where `bfloat16`; q, k, v stacked; gate, up
// stacked) and their biases, the layer's
// pool keys ([kv_heads, d, key_row]) and values ([kv_heads, value_slots, d]).
enum Field { INPUT_NORM, QKV, QKV_BIAS, O, O_BIAS, POST_NORM, GATE_UP, GATE_UP_BIAS, DOWN, DOWN_BIAS, KEYS, VALUES, FIELDS };

// hidden: [rows, hidden_size], updated in place through every layer; aux: [layers] addresses of
// [rows, hidden_size] outputs to copy each layer's result into (0: none), or null; cos, sin:
// [rows, d]; slots: [rows] cache slots; base .. bias_at: trtspec.runtime.forward.attention_kernel.KernelRows.
extern "C" void llama_layers(int64_t layers, const int64_t* table, float* hidden, int64_t rows, int64_t hidden_size,
                             int64_t heads, int64_t kv_heads, int64_t d, int64_t intermediate, float eps,
                             float scaling, const float* cos, const float* sin, const int64_t* slots,
                             int64_t key_row, int64_t key_slots, int64_t value_slots, const int64_t* base,
                             const int64_t* gather, const int64_t* gather_at, const int64_t* key_counts,
                             const float* bias, const int64_t* bias_at, void* exp, int exp_lanes,
                             const int64_t* aux, int bfloat16, int threads) {
  typedef void (*Linear)(const float*, int64_t, int64_t, const float*, int64_t, const float*, float*, int);
  const Linear linear = bfloat16 ? reinterpret_cast<Linear>(&rowdot_bf16_linear) : &rowdot_linear;
  if (linear == nullptr) return;  // not built here: native_layers never asks for it then
  const int64_t q_size = heads * d, kv_size = kv_heads * d, qkv_size = q_size + 2 * kv_size;
  const int64_t widest = qkv_size > 2 * intermediate ? qkv_size : 2 * intermediate;
  std::unique_ptr<float[]> normed(new float[rows * hidden_size]), projected(new float[rows * widest]),
      rotated(new float[rows * q_size]), attended(new float[rows * q_size]),
      activated(new float[rows * intermediate]), added(new float[rows * hidden_size]);
  auto pointer = [&](int64_t layer, Field field) { return reinterpret_cast<float*>(table[layer * FIELDS + field]); };
  auto add_residual = [&]() {
    for (int64_t e = 0; e < rows * hidden_size; ++e) hidden[e] = hidden[e] + added[e];
  };
  for (int64_t layer = 0; layer < layers; ++layer) {
    // 1. attention block
    llama_rms_norm(hidden, pointer(layer, INPUT_NORM), eps, rows, hidden_size, normed.get());
    linear(normed.get(), rows, hidden_size, pointer(layer, QKV), qkv_size, pointer(layer, QKV_BIAS),
                  projected.get(), threads);
    const float* query = projected.get();
    split_rows(rows, threads, [&](int64_t begin, int64_t end) {
      const float* q = query + begin * qkv_size;
      rope_write(q, qkv_size, q + q_size, qkv_size, q + q_size + kv_size, qkv_size, end - begin, heads, kv_heads, d,
                 cos + begin * d, sin + begin * d, slots + begin, pointer(layer, KEYS), key_row,
                 pointer(layer, VALUES), value_slots, rotated.get() + begin * q_size);
    });
    paged_attend(rotated.get(), rows, heads, kv_heads, d, pointer(layer, KEYS), key_row, pointer(layer, VALUES),
                 key_slots, base, gather, gather_at, key_counts, bias, bias_at, scaling, attended.get(), threads);
    linear(attended.get(), rows, q_size, pointer(layer, O), hidden_size, pointer(layer, O_BIAS), added.get(),
                  threads);
    add_residual();
    // 2. MLP block
    llama_rms_norm(hidden, pointer(layer, POST_NORM), eps, rows, hidden_size, normed.get());
    linear(normed.get(), rows, hidden_size, pointer(layer, GATE_UP), 2 * intermediate,
                  pointer(layer, GATE_UP_BIAS), projected.get(), threads);
    split_rows(rows, threads, [&](int64_t begin, int64_t end) {
      llama_silu_mul(projected.get() + begin * 2 * intermediate, end - begin, intermediate, exp, exp_lanes,
                     activated.get() + begin * intermediate);
    });
    linear(activated.get(), rows, intermediate, pointer(layer, DOWN), hidden_size, pointer(layer, DOWN_BIAS),
                  added.get(), threads);
    add_residual();
    if (aux != nullptr && aux[layer] != 0)
      memcpy(reinterpret_cast<float*>(aux[layer]), hidden, sizeof(float) * rows * hidden_size);
  }
}
