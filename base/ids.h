/*
 * Ids and names: the UUIDs of messages, attempts and tokens, the limits
 * of message ids, group ids and topic names, and the topic name check.
 */
#ifndef TBX_BASE_IDS_H
#define TBX_BASE_IDS_H

#include <stddef.h>

/** Text length of a UUID (without NUL). */
#define TBX_UUID_LEN 36
/** Longest message id: a UUID, or the id derived for untokened ingress
 *  "u:<topic>:<partition>:<offset>" (Kafka topics are <= 249 bytes). */
#define TBX_MSGID_MAX 300
/** Longest consumer group id we accept. */
#define TBX_GROUP_MAX 255
/** Longest topic name Kafka accepts. */
#define TBX_TOPIC_MAX 249

/** Writes a fresh UUID, lower-case text, into @p out: version 7 (RFC 9562),
 *  time-ordered (see base/ids.c). */
void tbx__uuid(char out[TBX_UUID_LEN + 1]);
/** @returns 1 if @p s (of @p len bytes, not NUL-terminated) is a UUID text. */
int tbx__is_uuid(const char *s, size_t len);
/** tbx__is_uuid()'s check and, when it holds, the text lower-cased into
 *  @p dst (NUL-terminated).  @returns 1 when @p s is a UUID, else 0 (@p dst
 *  then holds no meaning). */
int tbx__uuid_lower(char dst[TBX_UUID_LEN + 1], const char *s, size_t len);
/** 1 when @p topic is a name Kafka accepts: 1 to 249 characters of
 *  [a-zA-Z0-9._-], and not "." or "..".  A regular expression ("^…") is
 *  none. */
int tbx__topic_valid(const char *topic);

#endif
