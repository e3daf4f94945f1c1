/* AVX2 vectors for the full-state differential test (built with -mavx2):
   256-bit integer and floating-point arithmetic, shuffles, gathers,
   masked stores and broadcasts, their results kept in memory and in ymm
   registers across calls. */
#include <immintrin.h>
#include <stdio.h>

static int ints[4096];
static float floats[4096];
static double doubles[1024];
static int out[4096];
static volatile long long checksum;

__attribute__((noinline)) static __m256i mix(__m256i a, __m256i b, int round)
{
    __m256i s = _mm256_add_epi32(a, b);
    __m256i m = _mm256_mullo_epi32(s, _mm256_set1_epi32(round * 2 + 1));
    __m256i x = _mm256_xor_si256(m, _mm256_srli_epi32(a, 3));
    return _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(7, 0, 6, 1, 5, 2, 4, 3));
}

__attribute__((noinline)) static __m256 blend(__m256 a, __m256 b)
{
    __m256 p = _mm256_fmadd_ps(a, b, _mm256_set1_ps(0.5f));
    __m256 q = _mm256_sqrt_ps(_mm256_max_ps(p, _mm256_setzero_ps()));
    return _mm256_blend_ps(p, q, 0xa5);
}

int main(void)
{
    int i, round;
    for (i = 0; i < 4096; i++) {
        ints[i] = i * 2654435761u;
        floats[i] = (float)i / 7.0f;
    }
    for (i = 0; i < 1024; i++)
        doubles[i] = i * 0.25;
    for (round = 0; round < 6; round++) {
        __m256i acc = _mm256_set1_epi32(round);
        __m256 facc = _mm256_set1_ps((float)round);
        __m256d dacc = _mm256_setzero_pd();
        for (i = 0; i + 8 <= 4096; i += 8) {
            __m256i v = _mm256_loadu_si256((const __m256i *)&ints[i]);
            __m256i idx = _mm256_and_si256(v, _mm256_set1_epi32(4095));
            __m256i g = _mm256_i32gather_epi32(ints, idx, 4);
            acc = mix(acc, _mm256_add_epi32(v, g), round);
            _mm256_storeu_si256((__m256i *)&out[i], acc);
            facc = blend(facc, _mm256_loadu_ps(&floats[i]));
            _mm256_maskstore_ps(&floats[i], _mm256_setr_epi32(-1, 0, -1, 0, 0, -1, 0, -1), facc);
            if (i < 1024)
                dacc = _mm256_add_pd(dacc, _mm256_mul_pd(_mm256_loadu_pd(&doubles[i]), _mm256_broadcast_sd(&doubles[round])));
        }
        checksum += _mm256_extract_epi32(acc, 3) + (long long)_mm256_cvtss_f32(facc) + (long long)(dacc[0] + dacc[3]);
    }
    printf("checksum %lld\n", checksum);
    return 0;
}
