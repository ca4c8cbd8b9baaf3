#pragma once
// Which text tokens of one side stand for one indivisible stretch of text: those whose spans overlap, as the pieces
// of one character do. Byte-level BPE gives every piece the character's span; SentencePiece's byte fallback gives
// the last piece the character's span and the earlier ones an empty span at its start. The offset walk and the
// check that a side spells its text cut clusters by this one rule.
#include "distill/xtoken/alignment.h"

namespace retort::distill::xtoken {

// Whether a text token with `span` joins the open cluster [begin, end) of the text tokens before it.
inline bool joins_cluster(int64_t begin, int64_t end, const ByteSpan& span) {
  if (span.begin < end) return true;           // starts inside the cluster
  if (begin == end) return span.begin == end;  // the cluster so far is empty pieces at this byte: the rest of them
  return false;                                // an empty span at the cluster's end starts the next character
}

}  // namespace retort::distill::xtoken
