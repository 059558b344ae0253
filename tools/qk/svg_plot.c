/* A log-log line plot written as a standalone SVG file (no dependencies): decade grid,
 * SI tick labels, one marker-and-line series per provider, legend on the right. */
#include "bench_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *qkb_color(int i)
{
    static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                          "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                          "#17becf", "#bcbd22"};
    return palette[(unsigned)i % (sizeof palette / sizeof palette[0])];
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else fputc(*s, f);
    }
}

/* 10^e with the unit as "100ns", "1us", "10kB", "1MB". */
static void si_label(char *buf, size_t n, int e, const char *unit)
{
    static const char *const prefix[] = {"p", "n", "u", "m", "", "k", "M", "G", "T"};
    int g = (int)floor(e / 3.0);
    int r = e - 3 * g;
    if (g < -4 || g > 4) {
        snprintf(buf, n, "1e%d%s", e, unit);
        return;
    }
    snprintf(buf, n, "%d%s%s", r == 0 ? 1 : r == 1 ? 10 : 100, prefix[g + 4], unit);
}

typedef struct pt { double x, y; } pt;

static int cmp_pt(const void *a, const void *b)
{
    const pt *p = a, *q = b;
    return (p->x > q->x) - (p->x < q->x);
}

bool qkb_svg_plot(const char *path, const char *title, const char *xlabel, const char *xunit,
                  const char *ylabel, const char *yunit, const qkb_series *series, int nseries)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int s = 0; s < nseries; s++)
        for (int i = 0; i < series[s].n; i++) {
            double x = series[s].x[i], y = series[s].y[i];
            if (!(x > 0) || !(y > 0) || isinf(x) || isinf(y)) continue;
            x0 = fmin(x0, x); x1 = fmax(x1, x);
            y0 = fmin(y0, y); y1 = fmax(y1, y);
        }
    if (!(x0 <= x1)) { x0 = 1; x1 = 10; y0 = 1; y1 = 10; }
    int ex0 = (int)floor(log10(x0)), ex1 = (int)ceil(log10(x1));
    int ey0 = (int)floor(log10(y0)), ey1 = (int)ceil(log10(y1));
    if (ex1 == ex0) ex1++;
    if (ey1 == ey0) ey1++;

    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "qk bench: cannot write %s\n", path);
        return false;
    }
    const double W = 960, H = 600, L = 80, R = 230, T = 50, B = 60;
    const double pw = W - L - R, ph = H - T - B;
#define PX(v) (L + (log10(v) - ex0) / (double)(ex1 - ex0) * pw)
#define PY(v) (T + ph - (log10(v) - ey0) / (double)(ey1 - ey0) * ph)
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"28\" font-size=\"14\" text-anchor=\"middle\">", L + pw / 2);
    xml_text(f, title);
    fprintf(f, "</text>\n");

    /* grid and ticks: a line per decade, light lines at 2..9 */
    char lab[32];
    for (int e = ex0; e <= ex1; e++) {
        double v = pow(10, e);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#bbb\"/>\n",
                PX(v), T, PX(v), T + ph);
        si_label(lab, sizeof lab, e, xunit);
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n", PX(v),
                T + ph + 18, lab);
        for (int m = 2; m <= 9 && e < ex1; m++)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#eee\"/>\n",
                    PX(m * v), T, PX(m * v), T + ph);
    }
    for (int e = ey0; e <= ey1; e++) {
        double v = pow(10, e);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#bbb\"/>\n", L,
                PY(v), L + pw, PY(v));
        si_label(lab, sizeof lab, e, yunit);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", L - 6,
                PY(v) + 4, lab);
        for (int m = 2; m <= 9 && e < ey1; m++)
            fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                    L, PY(m * v), L + pw, PY(m * v));
    }
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
               "stroke=\"black\"/>\n", L, T, pw, ph);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">", L + pw / 2, H - 16);
    xml_text(f, xlabel);
    fprintf(f, "</text>\n<text transform=\"translate(20 %.0f) rotate(-90)\" "
               "text-anchor=\"middle\">", T + ph / 2);
    xml_text(f, ylabel);
    fprintf(f, "</text>\n");

    /* series */
    for (int s = 0; s < nseries; s++) {
        const qkb_series *sr = &series[s];
        pt *p = malloc(sizeof(pt) * (size_t)(sr->n > 0 ? sr->n : 1));
        if (!p) abort();
        int n = 0;
        for (int i = 0; i < sr->n; i++)
            if (sr->x[i] > 0 && sr->y[i] > 0 && !isinf(sr->x[i]) && !isinf(sr->y[i]))
                p[n++] = (pt){sr->x[i], sr->y[i]};
        qsort(p, (size_t)n, sizeof p[0], cmp_pt);
        fprintf(f, "<g stroke=\"%s\" fill=\"%s\">\n", sr->color, sr->color);
        if (n > 1) {
            fprintf(f, "<polyline fill=\"none\" stroke-width=\"1.5\"%s points=\"",
                    sr->dashed ? " stroke-dasharray=\"6 4\"" : "");
            for (int i = 0; i < n; i++) fprintf(f, "%.1f,%.1f ", PX(p[i].x), PY(p[i].y));
            fprintf(f, "\"/>\n");
        }
        for (int i = 0; i < n; i++) {
            if (sr->square)
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"5\" height=\"5\"/>\n",
                        PX(p[i].x) - 2.5, PY(p[i].y) - 2.5);
            else
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\"/>\n", PX(p[i].x), PY(p[i].y));
        }
        fprintf(f, "</g>\n");
        free(p);
        /* legend */
        double ly = T + 10 + 20 * s;
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
                   "stroke-width=\"2\"%s/>\n", L + pw + 12, ly, L + pw + 40, ly, sr->color,
                sr->dashed ? " stroke-dasharray=\"6 4\"" : "");
        if (sr->square)
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"5\" height=\"5\" fill=\"%s\"/>\n",
                    L + pw + 23.5, ly - 2.5, sr->color);
        else
            fprintf(f, "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"2.5\" fill=\"%s\"/>\n", L + pw + 26,
                    ly, sr->color);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">", L + pw + 46, ly + 4);
        xml_text(f, sr->name);
        fprintf(f, "</text>\n");
    }
#undef PX
#undef PY
    fprintf(f, "</svg>\n");
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok) fprintf(stderr, "qk bench: error writing %s\n", path);
    return ok;
}
