/*
** standalone_main.c - run a fuzz target without libFuzzer.
**
** Linked into each fuzz_<name> executable of a normal build (gcc or clang,
** with or without sanitizers). Every argument is a file or a directory; each
** file, and each file of each directory in name order (names starting with
** '.' skipped), is read whole and handed once to LLVMFuzzerTestOneInput().
** That replays the seed corpus and every kept crash on every ctest run, so a
** fixed bug stays fixed. A target that finds a problem aborts; this program
** prints the input's path first, so the failing file is the last one named.
**
** Exit status: 0 when every input ran, 1 when an argument or a file cannot
** be read (a missing corpus must not pass as an empty one).
*/
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Read the whole file at path into a new buffer; -1 on failure. */
static int read_all(const char *path, uint8_t **out, size_t *outlen)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL, *bigger;
	size_t len = 0, cap = 0, got;
	int rc = -1;

	if (f == NULL)
		return -1;
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			if ((bigger = realloc(buf, cap)) == NULL)
				goto done;
			buf = bigger;
		}
		got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f))
		goto done;
	*out = buf;
	*outlen = len;
	buf = NULL;
	rc = 0;
done:
	free(buf);
	fclose(f);
	return rc;
}

static int run_file(const char *path)
{
	uint8_t *data;
	size_t len;

	if (read_all(path, &data, &len) < 0) {
		fprintf(stderr, "fuzz: cannot read %s\n", path);
		return -1;
	}
	printf("fuzz: %s (%zu bytes)\n", path, len);
	fflush(stdout);
	LLVMFuzzerTestOneInput(data, len);
	free(data);
	return 0;
}

static int skip_dot(const struct dirent *e) { return e->d_name[0] != '.'; }

/* Run every file of dir in name order; returns how many, or -1. */
static int run_dir(const char *dir)
{
	struct dirent **names;
	char path[4096];
	int n, ran = 0, rc = 0;

	if ((n = scandir(dir, &names, skip_dot, alphasort)) < 0) {
		fprintf(stderr, "fuzz: cannot list %s\n", dir);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		int w =
		    snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);

		if (rc == 0 &&
		    (w < 0 || (size_t)w >= sizeof path || run_file(path) < 0))
			rc = -1;
		ran++;
		free(names[i]);
	}
	free(names);
	return rc < 0 ? -1 : ran;
}

int main(int argc, char **argv)
{
	struct stat st;
	int total = 0, n;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "fuzz: no such file or directory: %s\n",
				argv[i]);
			return 1;
		}
		n = S_ISDIR(st.st_mode)	    ? run_dir(argv[i])
		    : run_file(argv[i]) < 0 ? -1
					    : 1;
		if (n < 0)
			return 1;
		total += n;
	}
	printf("fuzz: %d inputs, no problem found\n", total);
	return 0;
}
