/* Runs a shell through system() (glibc: posix_spawn, i.e. clone with
 * CLONE_VM|CLONE_VFORK — the child borrows this process's memory) and
 * prints the child's exit status. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

int main(void) {
    int status = system("exit 3");
    printf("system returned %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
