/* Counts forever, sleeping between counts: a program that stays alive under
 * a debugger while a test sends the stub whatever it likes. */
#include <unistd.h>
volatile unsigned long counter;
int main(void) {
  for (;;) {
    counter++;
    usleep(2000);
  }
}
