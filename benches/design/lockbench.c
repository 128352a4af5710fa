// Costs of a cross-process append lock (docs/design-many-writers.md): a robust process-shared
// pthread mutex in a shared mapping against an OFD fcntl record lock, N processes taking it
// around a critical section of CS_NS, with OUTSIDE_NS of work between two takes.
// Build: gcc -O2 -o /tmp/lockbench benches/design/lockbench.c -lpthread
// Usage: /tmp/lockbench mutex|ofd PROCS ITERS CS_NS [OUTSIDE_NS]
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <stdatomic.h>
struct shared { pthread_mutex_t m; _Atomic uint64_t counter; uint64_t log_end; };
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void spin_ns(long ns){ if(ns<=0) return; double e=now()+ns*1e-9; while(now()<e); }
int main(int argc,char**argv){
  const char*mode=argv[1]; int procs=atoi(argv[2]); long iters=atol(argv[3]); long cs=atol(argv[4]); long outside=argc>5?atol(argv[5]):0;
  struct shared*s=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
  pthread_mutexattr_t a; pthread_mutexattr_init(&a); pthread_mutexattr_setpshared(&a,PTHREAD_PROCESS_SHARED); pthread_mutexattr_setrobust(&a,PTHREAD_MUTEX_ROBUST); pthread_mutex_init(&s->m,&a);
  char path[]="/tmp/lbXXXXXX"; int tfd=mkstemp(path); close(tfd);
  double t0=now();
  for(int p=0;p<procs;p++){ if(fork()==0){
      int fd=open(path,O_RDWR);
      for(long i=0;i<iters;i++){
        if(!strcmp(mode,"mutex")){ int r=pthread_mutex_lock(&s->m); if(r==EOWNERDEAD) pthread_mutex_consistent(&s->m); }
        else { struct flock fl={.l_type=F_WRLCK,.l_whence=SEEK_SET,.l_start=0,.l_len=1}; fcntl(fd,F_OFD_SETLKW,&fl); }
        s->log_end+=1; spin_ns(cs);
        if(!strcmp(mode,"mutex")) pthread_mutex_unlock(&s->m);
        else { struct flock fl={.l_type=F_UNLCK,.l_whence=SEEK_SET,.l_start=0,.l_len=1}; fcntl(fd,F_OFD_SETLK,&fl); }
        spin_ns(outside);
      }
      _exit(0);} }
  for(int p=0;p<procs;p++) wait(0);
  double dt=now()-t0; unlink(path);
  printf("%s procs=%d cs=%ldns outside=%ldns: %.0f ns per op per proc, aggregate %.2f M ops/s, log_end ok=%d\n",mode,procs,cs,outside,dt*1e9/iters,procs*iters/dt/1e6,(int)(s->log_end==(uint64_t)procs*iters));
}
