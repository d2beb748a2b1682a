/*
 * One process's line of /proc/PID/stat (Linux), for the spawn helper and the watchdog: its state,
 * parent, process group, session and start time (clock ticks after boot: with the pid, who it is).
 * `comm` may hold spaces and ')': the fields are read after its last ')'. Returns 0 when the process
 * is gone meanwhile or the line cannot be read.
 */
#ifndef ALEPH_PROC_STAT_H
#define ALEPH_PROC_STAT_H
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline int read_proc_stat_start(const char *pid, char *state, int *parent, int *group, int *session,
                                       unsigned long long *start) {
  char path[300], stat[1024];
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t length = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (length <= 0) return 0;
  stat[length] = '\0';
  char *after = strrchr(stat, ')');
  // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime
  // cstime priority nice num_threads itrealvalue starttime (fields 3 to 22)
  unsigned long long started = 0;
  int fields = after == NULL ? 0
                             : sscanf(after + 1, " %c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                                      state, parent, group, session, &started);
  if (start != NULL) *start = started;
  return fields == 5;
}

static inline int read_proc_stat(const char *pid, char *state, int *parent, int *group, int *session) {
  return read_proc_stat_start(pid, state, parent, group, session, NULL);
}
#endif
