/*
 * Files: whether two paths name one file.
 */
#ifndef TBX_BASE_FILE_H
#define TBX_BASE_FILE_H

/** 1 when @p a and @p b name one file: the same string, or the same device
 *  and inode (a file that does not exist is no other file's). */
int tbx__same_file(const char *a, const char *b);

#endif
