/* mxfp8.md, "Element and scale formats" and "The elements": the reference codecs for E4M3,
 * E5M2 and E8M0 against values this file computes from the bit-field definitions in double
 * (a code table and a nearest-value search), never against the library itself. */
#include "harness.h"
#include "internal.h"
#include "ref/mx_ref.h"

#include <float.h>
#include <math.h>

typedef struct fmt {
    const char *name;
    qk_dtype dt;
    int ebits, mbits, bias;
    bool has_inf;       /* E5M2: exponent all-ones with m = 0 is inf, m != 0 NaN */
    int maxcode;        /* largest finite positive code */
    double max;
} fmt;

static const fmt E4M3 = {"E4M3", QK_DTYPE_F8_E4M3, 4, 3, 7, false, 0x7e, 448.0};
static const fmt E5M2 = {"E5M2", QK_DTYPE_F8_E5M2, 5, 2, 15, true, 0x7b, 57344.0};
static const qk_round ROUNDS[2] = {QK_ROUND_NEAREST_EVEN, QK_ROUND_NEAREST_AWAY};

/* The value of code c by the spec's bit-field formula. */
static double spec_value(const fmt *f, int c)
{
    const int s = c >> 7, e = (c >> f->mbits) & ((1 << f->ebits) - 1),
              m = c & ((1 << f->mbits) - 1), emask = (1 << f->ebits) - 1;
    double v;
    if (f->has_inf && e == emask) v = m ? NAN : INFINITY;
    else if (!f->has_inf && e == emask && m == (1 << f->mbits) - 1) v = NAN;
    else if (e == 0) v = ldexp((double)m, 1 - f->bias - f->mbits);
    else v = ldexp(1.0 + m / (double)(1 << f->mbits), e - f->bias);
    return s ? -v : v;
}

static float dec(const fmt *f, int c) { return qk_f8_to_f32((uint8_t)c, f->dt); }
static int enc(const fmt *f, float v, qk_round r) { return qk_f8_from_f32(v, f->dt, r); }

/* Independent encoder: nearest finite value by binary search over the positive codes
   0..maxcode (ascending), ties by mode, saturation at max, the sign kept. v finite. */
static int search_encode(const fmt *f, double v, qk_round r)
{
    const int s = signbit(v) ? 0x80 : 0;
    const double a = fabs(v);
    if (a >= spec_value(f, f->maxcode)) return s | f->maxcode;
    int lo = 0, hi = f->maxcode; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (spec_value(f, mid) <= a) lo = mid;
        else hi = mid;
    }
    const double m = 0.5 * (spec_value(f, lo) + spec_value(f, hi));
    int c;
    if (a < m) c = lo;
    else if (a > m) c = hi;
    else if (r == QK_ROUND_NEAREST_AWAY) c = hi;
    else c = (lo & 1) ? hi : lo;
    return s | c;
}

static bool same_value(double a, double b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void decode_all_codes(const fmt *f)
{
    for (int c = 0; c < 256; c++) {
        const double want = spec_value(f, c);
        const float got = dec(f, c);
        CHECK(same_value(got, want), "%s code 0x%02x decodes to %a, spec %a", f->name, c,
              (double)got, want);
    }
}

static void test_e4m3_decode_all_codes(void)
{
    decode_all_codes(&E4M3);
    /* anchors of the spec's table */
    CHECK(dec(&E4M3, 0x7e) == 448.0f, "max");
    CHECK(dec(&E4M3, 0x08) == 0x1p-6f, "min normal");
    CHECK(dec(&E4M3, 0x01) == 0x1p-9f, "min subnormal");
    CHECK(dec(&E4M3, 0x80) == 0.0f && signbit(dec(&E4M3, 0x80)), "-0");
    CHECK(isnan(dec(&E4M3, 0x7f)) && isnan(dec(&E4M3, 0xff)), "NaN codes");
    CHECK(dec(&E4M3, 0x78) == 256.0f, "0x78 = 256");
}

static void test_e5m2_decode_all_codes(void)
{
    decode_all_codes(&E5M2);
    CHECK(dec(&E5M2, 0x7b) == 57344.0f, "max");
    CHECK(dec(&E5M2, 0x04) == 0x1p-14f, "min normal");
    CHECK(dec(&E5M2, 0x01) == 0x1p-16f, "min subnormal");
    CHECK(isinf(dec(&E5M2, 0x7c)) && dec(&E5M2, 0xfc) < 0, "inf codes");
    for (int c = 0x7d; c <= 0x7f; c++) CHECK(isnan(dec(&E5M2, c)) && isnan(dec(&E5M2, c | 0x80)), "NaN");
}

static void test_e8m0_decode_all_codes(void)
{
    for (int b = 0; b < 255; b++) {
        const float got = qk_e8m0_to_f32((uint8_t)b);
        CHECK((double)got == ldexp(1.0, b - 127), "E8M0 0x%02x decodes to %a", b, (double)got);
    }
    CHECK(isnan(qk_e8m0_to_f32(0xff)), "E8M0 0xFF is NaN");
    CHECK(qk_e8m0_to_f32(0) > 0.0f, "E8M0 0x00 is 2^-127, not zero");
}

/* Every finite code (and E5M2's infinities) re-encodes to itself in both modes. */
static void test_finite_codes_reencode_to_themselves(void)
{
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int fi = 0; fi < 2; fi++)
        for (int c = 0; c < 256; c++) {
            const float v = dec(fs[fi], c);
            if (isnan(v)) continue;
            for (int r = 0; r < 2; r++)
                CHECK(enc(fs[fi], v, ROUNDS[r]) == c, "%s 0x%02x (%a) re-encodes to 0x%02x (round %d)",
                      fs[fi]->name, c, (double)v, enc(fs[fi], v, ROUNDS[r]), r);
        }
}

/* Midpoints between neighbouring codes: NEAREST_EVEN picks the even code, NEAREST_AWAY the
   larger magnitude; the floats just below / above go to the lower / upper code. */
static void test_midpoints_round_per_mode(void)
{
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int fi = 0; fi < 2; fi++) {
        const fmt *f = fs[fi];
        for (int i = 0; i < f->maxcode; i++) {
            const double lo = spec_value(f, i), hi = spec_value(f, i + 1);
            const float mid = (float)(0.5 * (lo + hi));
            CHECK((double)mid == 0.5 * (lo + hi), "midpoint exact in f32");
            for (int neg = 0; neg < 2; neg++) {
                const float sg = neg ? -1.0f : 1.0f;
                const int s = neg ? 0x80 : 0;
                const int even = (i & 1) ? i + 1 : i;
                CHECK(enc(f, sg * mid, QK_ROUND_NEAREST_EVEN) == (s | even),
                      "%s tie %a between 0x%02x and 0x%02x, EVEN -> 0x%02x", f->name,
                      (double)(sg * mid), i, i + 1, enc(f, sg * mid, QK_ROUND_NEAREST_EVEN));
                CHECK(enc(f, sg * mid, QK_ROUND_NEAREST_AWAY) == (s | (i + 1)),
                      "%s tie %a, AWAY -> 0x%02x", f->name, (double)(sg * mid),
                      enc(f, sg * mid, QK_ROUND_NEAREST_AWAY));
                const float below = sg * nextafterf(mid, 0.0f), above = sg * nextafterf(mid, INFINITY);
                for (int r = 0; r < 2; r++) {
                    CHECK(enc(f, below, ROUNDS[r]) == (s | i), "%s %a just below a tie -> 0x%02x",
                          f->name, (double)below, enc(f, below, ROUNDS[r]));
                    CHECK(enc(f, above, ROUNDS[r]) == (s | (i + 1)), "%s %a just above a tie -> 0x%02x",
                          f->name, (double)above, enc(f, above, ROUNDS[r]));
                }
            }
        }
    }
}

/* A finite input never becomes NaN or inf: rounded magnitudes above max saturate. */
static void test_saturation_at_and_beyond_max(void)
{
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int fi = 0; fi < 2; fi++) {
        const fmt *f = fs[fi];
        const double step = f->max - spec_value(f, f->maxcode - 1);
        const float vals[] = {(float)f->max, nextafterf((float)f->max, INFINITY),
                              (float)(f->max + step / 2), (float)(f->max + step), (float)(2 * f->max),
                              1e10f, 3e38f, FLT_MAX};
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
            for (int r = 0; r < 2; r++) {
                CHECK(enc(f, vals[k], ROUNDS[r]) == f->maxcode, "%s %g -> 0x%02x", f->name,
                      (double)vals[k], enc(f, vals[k], ROUNDS[r]));
                CHECK(enc(f, -vals[k], ROUNDS[r]) == (0x80 | f->maxcode), "%s %g -> 0x%02x",
                      f->name, (double)-vals[k], enc(f, -vals[k], ROUNDS[r]));
            }
        /* just below max stays below the saturation code's neighbour logic */
        CHECK(enc(f, nextafterf((float)f->max, 0.0f), QK_ROUND_NEAREST_EVEN) == f->maxcode,
              "%s just below max rounds to max", f->name);
    }
    /* infinite inputs are not finite: E4M3 has no inf, so NaN; E5M2 keeps ±inf */
    for (int r = 0; r < 2; r++) {
        CHECK(isnan(dec(&E4M3, enc(&E4M3, INFINITY, ROUNDS[r]))), "E4M3 +inf -> NaN code");
        CHECK(isnan(dec(&E4M3, enc(&E4M3, -INFINITY, ROUNDS[r]))), "E4M3 -inf -> NaN code");
        CHECK(enc(&E5M2, INFINITY, ROUNDS[r]) == 0x7c, "E5M2 +inf -> 0x7C");
        CHECK(enc(&E5M2, -INFINITY, ROUNDS[r]) == 0xfc, "E5M2 -inf -> 0xFC");
    }
}

/* In the subnormal range the step is fixed (2^-9 for E4M3, 2^-16 for E5M2). */
static void test_subnormal_steps(void)
{
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int fi = 0; fi < 2; fi++) {
        const fmt *f = fs[fi];
        const int emin = 1 - f->bias;
        const double step = ldexp(1.0, emin - f->mbits);
        for (int k = 0; k <= (1 << f->mbits); k++)
            for (int r = 0; r < 2; r++) {
                CHECK(enc(f, (float)(k * step), ROUNDS[r]) == k, "%s %d steps -> 0x%02x", f->name, k,
                      enc(f, (float)(k * step), ROUNDS[r]));
                /* a quarter step either side rounds back to k */
                if (k > 0)
                    CHECK(enc(f, (float)((k - 0.25) * step), ROUNDS[r]) == k, "%s (k-1/4) steps", f->name);
                CHECK(enc(f, (float)((k + 0.25) * step), ROUNDS[r]) == k, "%s (k+1/4) steps", f->name);
            }
        /* half the smallest step: a tie between 0 (even) and 1 */
        CHECK(enc(f, (float)(step / 2), QK_ROUND_NEAREST_EVEN) == 0x00, "%s half step EVEN", f->name);
        CHECK(enc(f, (float)(step / 2), QK_ROUND_NEAREST_AWAY) == 0x01, "%s half step AWAY", f->name);
        /* f32 subnormals and tiny normals round to signed zero */
        const float tiny[] = {FLT_TRUE_MIN, 1e-40f, FLT_MIN, 1e-30f, (float)(step / 4)};
        for (size_t k = 0; k < sizeof tiny / sizeof tiny[0]; k++)
            for (int r = 0; r < 2; r++) {
                CHECK(enc(f, tiny[k], ROUNDS[r]) == 0x00, "%s %a -> +0", f->name, (double)tiny[k]);
                CHECK(enc(f, -tiny[k], ROUNDS[r]) == 0x80, "%s %a -> -0", f->name, (double)-tiny[k]);
            }
    }
}

static void test_signed_zeros(void)
{
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int fi = 0; fi < 2; fi++)
        for (int r = 0; r < 2; r++) {
            CHECK(enc(fs[fi], 0.0f, ROUNDS[r]) == 0x00, "+0");
            CHECK(enc(fs[fi], -0.0f, ROUNDS[r]) == 0x80, "-0 keeps its sign");
            CHECK(enc(fs[fi], -1e-20f, ROUNDS[r]) == 0x80, "negative value rounding to zero -> 0x80");
        }
}

static void test_nan(void)
{
    const fmt *fs[2] = {&E4M3, &E5M2};
    for (int fi = 0; fi < 2; fi++)
        for (int r = 0; r < 2; r++) {
            CHECK(isnan(dec(fs[fi], enc(fs[fi], NAN, ROUNDS[r]))), "%s NaN -> NaN code", fs[fi]->name);
            CHECK(isnan(dec(fs[fi], enc(fs[fi], -NAN, ROUNDS[r]))), "%s -NaN -> NaN code", fs[fi]->name);
            CHECK((enc(fs[fi], NAN, ROUNDS[r]) & 0x7f) == 0x7f, "%s NaN code is 0x7F", fs[fi]->name);
        }
}

/* Random f32 across and beyond each format's range, against the search encoder. */
static void test_random_values_against_search_encoder(void)
{
    const fmt *fs[2] = {&E4M3, &E5M2};
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int fi = 0; fi < 2; fi++) {
        const fmt *f = fs[fi];
        const int emin = 1 - f->bias, emax = (int)ilogb(f->max);
        for (int i = 0; i < 60000; i++) {
            const uint64_t u = qk_rand_u64(&st);
            /* exponents from below half the smallest step to above max */
            const int e = emin - f->mbits - 3 + (int)(u % (uint64_t)(emax - emin + f->mbits + 6));
            uint32_t bits = (uint32_t)(u >> 32);
            /* keep few mantissa bits sometimes, so ties and exact values are common */
            if ((u >> 8) & 1) bits &= 0xfff00000u | (uint32_t)((u >> 9) & 0xff) << 12;
            float v = ldexpf(1.0f + (float)(bits & 0x7fffffu) * 0x1p-23f, e);
            if ((u >> 16) & 1) v = -v;
            for (int r = 0; r < 2; r++) {
                const int want = search_encode(f, v, ROUNDS[r]), got = enc(f, v, ROUNDS[r]);
                CHECK(got == want, "%s %a (round %d): got 0x%02x, want 0x%02x", f->name, (double)v, r,
                      got, want);
            }
        }
    }
}

int main(void)
{
    RUN(test_e4m3_decode_all_codes);
    RUN(test_e5m2_decode_all_codes);
    RUN(test_e8m0_decode_all_codes);
    RUN(test_finite_codes_reencode_to_themselves);
    RUN(test_midpoints_round_per_mode);
    RUN(test_saturation_at_and_beyond_max);
    RUN(test_subnormal_steps);
    RUN(test_signed_zeros);
    RUN(test_nan);
    RUN(test_random_values_against_search_encoder);
    return qk_test_finish();
}
