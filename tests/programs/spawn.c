/* Starts /bin/echo with posix_spawn (a vfork-like clone), waits for it and
 * exits with its status plus 3. */
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>

extern char **environ;

int main(void) {
  pid_t child;
  char *argv[] = {"echo", "spawned", NULL};
  if (posix_spawn(&child, "/bin/echo", NULL, NULL, argv, environ) != 0)
    return 100;
  int status = 0;
  if (waitpid(child, &status, 0) != child)
    return 101;
  printf("child status %d\n", status);
  return WIFEXITED(status) ? WEXITSTATUS(status) + 3 : 102;
}
