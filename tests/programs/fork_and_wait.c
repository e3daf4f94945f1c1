/* Forks a child that exits with status 7; the parent waits for it, prints
 * what it saw, and exits 0 only if that was status 7 (1 otherwise).
 * Recorded or debugged, the parent must see the same status. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    pid_t child = fork();
    if (child == 0) {
        _exit(7);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child) {
        return 1;
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    printf("child exited %d\n", code);
    return code == 7 ? 0 : 1;
}
