/* lz4 compressing a buffer: the C library of PyPI's lz4 4.4.5 sdist
   (lz4libs/lz4.c, lz4hc.c; the tests build it from the sdist tests/run.sh
   downloads). 50 KB of text-like bytes, compressed fast and at HC level
   9, decompressed and compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lz4.h"
#include "lz4hc.h"

int main(void) {
    const int n = 50000;
    static const char *words[] = {"time ", "travel ", "debugging ", "of ", "the ", "program ", "record ", "replay ", "\n"};
    char *source = malloc(n);
    unsigned seed = 12345;
    for (int at = 0; at < n;) {
        seed = seed * 1103515245 + 12345;
        const char *word = words[(seed >> 16) % 9];
        for (const char *c = word; *c && at < n; c++)
            source[at++] = *c;
    }
    int bound = LZ4_compressBound(n);
    char *compressed = malloc(bound);
    char *back = malloc(n);
    int fast = LZ4_compress_default(source, compressed, n, bound);
    int restored = LZ4_decompress_safe(compressed, back, fast, n);
    int same = restored == n && memcmp(source, back, n) == 0;
    int high = LZ4_compress_HC(source, compressed, n, bound, 9);
    printf("%d %d %d %d\n", fast, high, restored, same);
    return same ? 0 : 1;
}
