/*
 * One process's line of /proc/PID/stat (Linux), for the spawn helper and the watchdog: its state,
 * parent, process group and session. `comm` may hold spaces and ')': the fields are read after its
 * last ')'. Returns 0 when the process is gone meanwhile or the line cannot be read.
 */
#ifndef ALEPH_PROC_STAT_H
#define ALEPH_PROC_STAT_H
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline int read_proc_stat(const char *pid, char *state, int *parent, int *group, int *session) {
  char path[300], stat[1024];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t length = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (length <= 0) return 0;
  stat[length] = '\0';
  char *after = strrchr(stat, ')');
  return after != NULL && sscanf(after + 1, " %c %d %d %d", state, parent, group, session) == 4;
}
#endif
