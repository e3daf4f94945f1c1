/* Daemonizes the classic way (fork, setsid, fork) and exits at once; the
 * daemon waits a little, then writes argv[1] ("daemon done") and exits.
 * Recorded, the parent's recording ends at its exit and the daemon, never
 * traced, still does its work. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        return 2;
    }
    if (fork() != 0) {
        return 0; /* the parent: done */
    }
    setsid();
    if (fork() != 0) {
        _exit(0); /* the session leader: gone */
    }
    usleep(200 * 1000);
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        _exit(1);
    }
    fputs("daemon done\n", f);
    fclose(f);
    _exit(0);
}
