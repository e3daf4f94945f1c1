/* gcc -O2 moves classify's path through a cold function into
   classify.cold, in .text.unlikely below classify itself: classify's
   branch there (after its jump table) targets code before the function's
   first address, which LLDB names `classify - N` (`<-N>` from inside
   classify). The program writes to stderr, whose copy relocation aligns
   .bss to 32 bytes: crtstuff's `__TMC_END__` then lies between .data and
   .bss, in no section, which LLDB names by its segment. */
#include <stdio.h>

__attribute__((cold, noinline)) static void report(int n) {
    fprintf(stderr, "large %d\n", n);
}

__attribute__((noinline)) static int classify(int n) {
    switch (n % 7) {
    case 0: return n * 3;
    case 1: return n + 11;
    case 2: return n ^ 0x55;
    case 3: return n - 9;
    case 4: return n << 2;
    case 5: return n / 3;
    default:
        if (n > 1000) {
            report(n);
            n = -n;
        }
        return n + 1;
    }
}

int main(int argc, char **argv) {
    int sum = 0;
    for (int i = 0; i < 14; i++) sum += classify(i);
    sum += classify(1007 + argc - 1);
    return sum & 0x7f;
}
