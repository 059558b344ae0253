/* The `qk` command: one function per subcommand (each in its own cmd_*.c / bench_*.c file),
 * registered in main.c's table. Each returns the process exit status. */
#ifndef QK_TOOL_H
#define QK_TOOL_H

#include <stdio.h>

#include "io/ms_quantize.h"

int qk_cmd_info(int argc, char **argv);
void qk_info_print(FILE *f);              /* what `qk info` prints (also python -m qkern info) */
int qk_cmd_bench(int argc, char **argv);   /* bench norm|linear|quant|all */
int qk_cmd_inspect(int argc, char **argv);  /* inspect PATH [--json] (cmd_inspect.c) */
int qk_cmd_quantize(int argc, char **argv); /* quantize IN OUT_DIR (cmd_quantize.c) */
/* its success line, "qk quantize: N linear weights quantized ..." (qk demo prints it too) */
void qk_quantize_print_summary(const qk_ms_quantize_report *rep, const qk_mx_options *opt,
                               const char *out);
int qk_cmd_demo(int argc, char **argv);     /* demo [--model DIR] (cmd_demo.c) */

#endif
