/* The cpu backend's one thread pool (OpenMP): it splits the C stages' outer loops and the BLAS
   calls of contractions, so the stages and BLAS never run two pools that spin against each other
   on few cores. compiler.Runtime loads it; built once by the system compiler and cached. */
#include <stdint.h>

typedef void (*stage_fn)(void**, const int64_t*, int64_t, int64_t);

/* stage(p, v, lo, hi) over [0, outer) in `parts` contiguous pieces, one per thread */
void anneal_parallel(stage_fn stage, void** p, const int64_t* v, int64_t outer, int64_t parts) {
  #pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int64_t i = 0; i < parts; i++) stage(p, v, outer * i / parts, outer * (i + 1) / parts);
}

/* cblas_sgemm with 64-bit or 32-bit integers (OpenBLAS built with or without INTERFACE64) */
typedef void (*sgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t,
                           const float*, int64_t, float, float*, int64_t);
typedef void (*sgemm32_fn)(int, int, int, int32_t, int32_t, int32_t, float, const float*, int32_t,
                           const float*, int32_t, float, float*, int32_t);
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

/* one piece of anneal_gemm's work: matrix i, rows [m * part / split, m * (part + 1) / split) */
static void gemm_piece(void* sgemm, int ilp64, int64_t i, int64_t part, int64_t split, const int64_t* offsets,
                       int64_t m, int64_t n, int64_t k, const float* a, int ta, int64_t lda, const float* b, int tb,
                       int64_t ldb, float* c, int64_t ldc) {
  int64_t lo = m * part / split, hi = m * (part + 1) / split;
  if (hi == lo) return;
  const float* ap = a + offsets[3 * i] + (ta ? lo : lo * lda);
  const float* bp = b + offsets[3 * i + 1];
  float* cp = c + offsets[3 * i + 2] + lo * ldc;
  int opa = ta ? TRANS : NO_TRANS, opb = tb ? TRANS : NO_TRANS;
  if (ilp64)
    ((sgemm64_fn)sgemm)(ROW_MAJOR, opa, opb, hi - lo, n, k, 1.0f, ap, lda, bp, ldb, 0.0f, cp, ldc);
  else
    ((sgemm32_fn)sgemm)(ROW_MAJOR, opa, opb, (int32_t)(hi - lo), (int32_t)n, (int32_t)k, 1.0f, ap, (int32_t)lda,
                        bp, (int32_t)ldb, 0.0f, cp, (int32_t)ldc);
}

/* count matrix products: c + offsets[3i+2] = op(a + offsets[3i]) @ op(b + offsets[3i+1]), each m x k times
   k x n (op transposes a matrix stored k x m when ta, likewise tb), c rows ldc apart. The work is
   count x split pieces, split cutting the m rows; one thread runs them without entering OpenMP at all
   (a forked child's OpenMP pool is gone). */
void anneal_gemm(void* sgemm, int ilp64, int64_t count, const int64_t* offsets, int64_t m, int64_t n, int64_t k,
                 const float* a, int ta, int64_t lda, const float* b, int tb, int64_t ldb, float* c, int64_t ldc,
                 int64_t split, int64_t threads) {
  if (threads <= 1) {
    for (int64_t t = 0; t < count * split; t++)
      gemm_piece(sgemm, ilp64, t / split, t % split, split, offsets, m, n, k, a, ta, lda, b, tb, ldb, c, ldc);
    return;
  }
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < count * split; t++)
    gemm_piece(sgemm, ilp64, t / split, t % split, split, offsets, m, n, k, a, ta, lda, b, tb, ldb, c, ldc);
}
