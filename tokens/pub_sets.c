/* The token sets of a publisher's flush (pub_sets.h). */
#include <stdlib.h>
#include <string.h>

#include "base/ids.h"
#include "tokens/pub_sets.h"

void tbx__pub_sets_free(tbx__pub_sets_t *ps)
{
	free(ps->sets);
	free(ps->ids);
	memset(ps, 0, sizeof(*ps));
}

int tbx__pub_set_bit(tbx__pub_sets_t *ps, tbx__edge_item_t *item)
{
	tbx__set_item_t *s = NULL;

	for (size_t k = ps->cnt; k-- > 0;)
		if (ps->sets[k].part == item->part &&
		    strcmp(ps->sets[k].topic, item->topic) == 0) {
			s = &ps->sets[k];
			break;
		}
	if (!s || s->nbits == TBX_SET_BITS_MAX) {
		if (ps->cnt == ps->cap) {
			size_t cap = ps->cap ? ps->cap * 2 : 8;
			tbx__set_item_t *sets;
			char(*ids)[TBX_UUID_LEN + 1];

			if (!(sets = realloc(ps->sets, cap * sizeof(*sets))))
				return TBX_ENOMEM;
			ps->sets = sets;
			if (!(ids = realloc(ps->ids, cap * sizeof(*ids))))
				return TBX_ENOMEM;
			ps->ids = ids;
			/* set_id points into ids, which moved. */
			for (size_t k = 0; k < ps->cnt; k++)
				ps->sets[k].set_id = ps->ids[k];
			ps->cap = cap;
		}
		s = &ps->sets[ps->cnt];
		tbx__uuid(ps->ids[ps->cnt]);
		s->set_id = ps->ids[ps->cnt++];
		s->topic = item->topic;
		s->part = item->part;
		s->nbits = 0;
	}
	memcpy(item->set_id, s->set_id, TBX_UUID_LEN + 1);
	item->bit = s->nbits++;
	item->token[0] = '\0';
	return TBX_OK;
}
