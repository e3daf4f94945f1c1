/* String-heavy code for the full-state differential test: glibc's memset,
   memcpy, memmove, strcpy, strlen and calloc at sizes 0 to 64 KiB (glibc
   takes `rep stosb`/`rep movsb` for the large ones), every string
   instruction inline (movs, stos, cmps, scas, lods; b/w/d/q; rep, repe,
   repne; the direction flag set; a zero count), and a `rep stosb` that
   faults part-way on a protected page, whose SIGSEGV handler opens the
   page so that the instruction resumes. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static char source[70000];
static char dest[70000];
static char text[4200];
static volatile unsigned long checksum;
static char *pages;
static volatile int faults;

/* One string instruction with its count (rcx), destination (rdi), source
   (rsi) and accumulator (rax); what they end as goes into the checksum. */
#define STRING_OP(insn, count, di, si, ax)                                                   \
    do {                                                                                     \
        unsigned long c_ = (count), d_ = (unsigned long)(di), s_ = (unsigned long)(si), a_ = (ax); \
        __asm__ volatile(insn : "+c"(c_), "+D"(d_), "+S"(s_), "+a"(a_) : : "memory", "cc");  \
        checksum += c_ * 3 + d_ * 5 + s_ * 7 + a_;                                           \
    } while (0)

static void on_segv(int signal, siginfo_t *info, void *context)
{
    (void)signal;
    (void)context;
    faults++;
    mprotect((void *)((unsigned long)info->si_addr & ~4095UL), 4096, PROT_READ | PROT_WRITE);
}

static void every_string_instruction(unsigned long n)
{
    char *d = dest + 1000, *s = source + 3000;
    STRING_OP("rep movsb", n, d, s, 0);
    STRING_OP("rep movsw", n, d, s, 0);
    STRING_OP("rep movsl", n, d, s, 0);
    STRING_OP("rep movsq", n, d, s, 0);
    STRING_OP("rep stosb", n, d, s, 0x11 + n);
    STRING_OP("rep stosw", n, d, s, 0x2222 + n);
    STRING_OP("rep stosl", n, d, s, 0x33333333 + n);
    STRING_OP("rep stosq", n, d, s, 0x4444444444444444UL + n);
    memcpy(d, s, 8 * n);
    d[n / 2] ^= 1;
    STRING_OP("repe cmpsb", n, d, s, 0);
    STRING_OP("repe cmpsw", n, d, s, 0);
    STRING_OP("repe cmpsl", n, d, s, 0);
    STRING_OP("repe cmpsq", n, d, s, 0);
    /* (repne cmps, and cmps without a prefix: Valgrind 3.19 takes them
       for illegal instructions.) */
    STRING_OP("repne scasb", n, d, s, (unsigned char)d[n / 2]);
    STRING_OP("repne scasw", n, d, s, 0x1234);
    STRING_OP("repe scasl", n, d, s, *(unsigned *)d);
    STRING_OP("repe scasq", n, d, s, *(unsigned long *)d);
    STRING_OP("rep lodsb", n, d, s, 0);
    STRING_OP("rep lodsq", n, d, s, 0);
    /* Without a prefix: one element each. */
    STRING_OP("movsb", n, d, s, 0);
    STRING_OP("movsq", n, d, s, 0);
    STRING_OP("stosl", n, d, s, 0x55667788);
    STRING_OP("scasb", n, d, s, 7);
    STRING_OP("lodsl", n, d, s, 0);
    /* The direction flag set: backwards, from the ends. */
    STRING_OP("std; rep movsb; cld", n, d + n, s + n, 0);
    STRING_OP("std; rep stosq; cld", n, d + 8 * n, s, 0x0102030405060708UL);
    STRING_OP("std; repne scasb; cld", n, d + n, s, 0x7f);
    STRING_OP("std; repe cmpsl; cld", n, d + 4 * n, s + 4 * n, 0);
}

int main(void)
{
    struct sigaction action;
    unsigned long size;
    int i;
    for (i = 0; i < (int)sizeof source; i++)
        source[i] = (char)(i * 7 + 1 + i / 251);
    every_string_instruction(0);
    every_string_instruction(1);
    every_string_instruction(37);
    every_string_instruction(1000);
    for (size = 0; size <= 65536; size = size < 16 ? size + 1 : size * 2 + 3) {
        char *block;
        memset(dest, (int)size, size);
        memcpy(dest, source, size);
        memmove(dest + 3, dest, size > 60000 ? 60000 : size);
        block = calloc(1, size);
        if (size > 0) {
            block[size - 1] = (char)size;
            checksum += (unsigned char)block[size / 2] + (unsigned char)dest[size / 2];
        }
        free(block);
    }
    for (i = 0; i < 4096; i = i * 2 + 5) {
        memset(text, 'a' + i % 26, (size_t)i);
        text[i] = 0;
        strcpy(dest, text);
        checksum += strlen(dest) + strlen(text + i / 2);
    }
    /* A REP that faults part-way: 4000 bytes before a protected page,
       8000 into it. */
    pages = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mprotect(pages + 4096, 4096, PROT_NONE);
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &action, NULL);
    STRING_OP("rep stosb", 8000, pages + 96, 0, 0x5a);
    checksum += (unsigned char)pages[4096 + 100];
    printf("checksum %lu, faults %d\n", checksum, faults);
    return 0;
}
