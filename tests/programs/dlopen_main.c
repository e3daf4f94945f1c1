/* Loads a shared library built by the test (libretracedemo.so, given as
   argv[1]) with dlopen, calls into it, and unloads it. */
#include <dlfcn.h>
#include <stdio.h>

int demo_calls;

int main(int argc, char **argv) {
  if (argc < 2)
    return 100;
  void *lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 101;
  }
  int (*mix)(int, int) = (int (*)(int, int))dlsym(lib, "demo_mix");
  int v = 0;
  for (int i = 0; i < 10; i++)
    v = mix(v, i);
  dlclose(lib);
  return v & 0x7f;
}
