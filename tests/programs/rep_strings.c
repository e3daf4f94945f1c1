/* glibc's string functions at sizes where they use REP string
   instructions (rep stosb, rep movsb): memset of 12,304 bytes, calloc of
   as many, a 60 KB memcpy. The replay must show their results right after
   them, and a reverse watchpoint on a byte they wrote must stop in them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char big[12304];
static char src[61440], dst[61440];

__attribute__((noinline)) void clear_it(char *p, size_t n) {
    memset(p, 'A', n);
}

__attribute__((noinline)) void copy_it(void) {
    memcpy(dst, src, sizeof dst);
}

int main(void) {
    for (unsigned i = 0; i < sizeof src; i++)
        src[i] = (char)(i * 7 + 1);
    clear_it(big, sizeof big);
    char *p = calloc(1, 12304);
    copy_it();
    printf("%p %d %d %d\n", (void *)p, big[100], dst[40000], p[5000]); /* line:print */
    return 0;
}
