/* Frames for backtraces on a replay: four calls deep from main, the
   innermost with a 20 KB stack frame it barely writes, over a fresh
   100 KB heap block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int leaf(int *block, int n) {
    char big[20000];
    big[0] = (char)n;
    block[n] = n * 3;
    return block[n] + big[0];
}
static int middle(int *block, int n) { return leaf(block, n + 1) + 1; }
static int upper(int *block, int n) { return middle(block, n + 1) + 2; }
static int top(int n) {
    int *block = malloc(100000);
    int r = upper(block, n);
    free(block);
    return r;
}
int main(int argc, char **argv) {
    printf("%d\n", top(argc));
    return 0;
}
