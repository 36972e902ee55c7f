/*
 * swapper A B: exchange the directories A and B (renameat2 RENAME_EXCHANGE)
 * in a loop until killed, a few microseconds apart: the attacker of
 * TestSwapAboveLauncherRace. Prints "swapping" once the first exchange
 * worked, so the test starts its steps only when the race is on.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

int main(int argc, char **argv)
{
	int first = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: swapper A B\n");
		return 2;
	}
	for (;;) {
		if (syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2],
			    RENAME_EXCHANGE)) {
			perror("renameat2");
			return 1;
		}
		if (first) {
			printf("swapping\n");
			fflush(stdout);
			first = 0;
		}
		usleep(20);
	}
}
