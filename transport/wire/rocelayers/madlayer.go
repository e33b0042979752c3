package rocelayers

import (
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// MAD is the management datagram a UD SEND to or from QP1 carries: the
// common header, the class data and, for a CM MAD of a known attribute, the
// decoded CM message. Contents is the whole MAD (256 bytes from a
// conforming sender).
type MAD struct {
	layers.BaseLayer
	mad.Header
	Data []byte      // the class data after the header (aliases Contents)
	CM   mad.Message // decoded when the class is CM and the attribute known; else nil
}

func (m *MAD) LayerType() gopacket.LayerType     { return LayerTypeMAD }
func (m *MAD) CanDecode() gopacket.LayerClass    { return LayerTypeMAD }
func (m *MAD) NextLayerType() gopacket.LayerType { return gopacket.LayerTypeZero }

// DecodeFromBytes decodes the header and, for a CM MAD, the message. A CM
// MAD too short for its message is an error; an unknown CM attribute or
// another class leaves CM nil.
func (m *MAD) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	m.CM = nil
	if err := m.Header.Decode(data); err != nil {
		df.SetTruncated()
		return fmt.Errorf("rocelayers: %w", err)
	}
	m.BaseLayer = layers.BaseLayer{Contents: data}
	m.Data = data[mad.HeaderLen:]
	if m.MgmtClass != mad.ClassCM {
		return nil
	}
	msg := mad.NewMessage(m.AttributeID)
	if msg == nil {
		return nil
	}
	if err := msg.Decode(m.Data); err != nil {
		df.SetTruncated()
		return fmt.Errorf("rocelayers: %w", err)
	}
	m.CM = msg
	return nil
}

// SerializeTo writes the header fields and Data. CM is a decoded view:
// to send a changed or new message, SetCM it first.
func (m *MAD) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	v, err := b.PrependBytes(mad.HeaderLen + len(m.Data))
	if err != nil {
		return err
	}
	m.Header.Encode(v)
	copy(v[mad.HeaderLen:], m.Data)
	return nil
}

// SetCM makes m a 256-byte CM MAD carrying msg with transaction ID tid, in
// the header kernel ib_cm sends (see mad.CMHeader).
func (m *MAD) SetCM(tid uint64, msg mad.Message) {
	buf := mad.AppendCM(nil, mad.CMHeader(tid, msg.AttributeID()), msg)
	_ = m.Header.Decode(buf)
	m.BaseLayer = layers.BaseLayer{Contents: buf}
	m.Data = buf[mad.HeaderLen:]
	m.CM = msg
}
