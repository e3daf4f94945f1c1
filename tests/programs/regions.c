/* Memory regions a replay must serve as they were: .data (counter), the
   heap (a malloc'd block), the stack, and three anonymous pages whose
   middle one is made inaccessible, at stop_here(). */
#include <stdlib.h>
#include <sys/mman.h>

int counter = 5;
char *block;
char *pages;

void stop_here(void) {
    counter++;
}

int main(void) {
    block = malloc(100);
    pages = mmap(0, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pages[0] = 1;
    mprotect(pages + 4096, 4096, PROT_NONE);
    stop_here();
    block[0] = (char)counter;
    return block[0] == 6 ? 0 : 1;
}
